package protocol

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// EgressWindow is how many bytes of a stream either side may send before the other has
// acknowledged them: the receiver buffers at most this much per stream, and ends a stream whose
// peer sends more. EgressChunk is the most one KindEgressData message carries. EgressAckEvery
// is how many bytes the receiver passes on before it acknowledges them (at most the window).
const (
	EgressWindow   = 1 << 20
	EgressChunk    = 64 << 10
	EgressAckEvery = EgressWindow / 4
)

// Stream carries one connection's bytes over a Conn, both ways, with flow control: local is
// the executor's accepted client connection, or the daemon's dialed one. Each side runs a
// Stream with the same number; Handle passes it the peer's messages (without blocking: it is
// called from the session's read loop). When both directions have ended, or either side
// aborted, local is closed and onDone called once. A read of local that fails with io.EOF, or
// with an error that has a method EndsStream() returning true (a cap), ends this side's
// direction cleanly: the peer gets every byte read before it, then the end.
type Stream struct {
	id     uint64
	msgID  string
	conn   *Conn
	local  io.ReadWriteCloser
	onDone func(error)

	mu       sync.Mutex
	credit   int // bytes this side may still send
	queue    [][]byte
	queued   int
	peerEOF  bool // the peer sends no more
	aborted  bool
	abortErr error
	wake     chan struct{} // capacity 1: the writer has work
	credited chan struct{} // capacity 1: the reader has credit
	gone     chan struct{} // closed on abort
}

// NewStream returns stream id of the run or install msgID, carrying local. Start it with
// Start once both sides know the stream.
func NewStream(conn *Conn, msgID string, id uint64, local io.ReadWriteCloser, onDone func(error)) *Stream {
	return &Stream{id: id, msgID: msgID, conn: conn, local: local, onDone: onDone, credit: EgressWindow,
		wake: make(chan struct{}, 1), credited: make(chan struct{}, 1), gone: make(chan struct{})}
}

// ID is the stream's number.
func (s *Stream) ID() uint64 { return s.id }

// Start pumps local's bytes to the peer and the peer's to local until the stream ends.
func (s *Stream) Start() {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.send() }()
	go func() { defer wg.Done(); s.receive() }()
	go func() {
		wg.Wait()
		_ = s.local.Close()
		s.mu.Lock()
		err := s.abortErr
		s.mu.Unlock()
		if s.onDone != nil {
			s.onDone(err)
		}
	}()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Handle passes the peer's KindEgressData, KindEgressAck or KindEgressClose message to the
// stream. It never blocks.
func (s *Stream) Handle(m *Message) {
	if m.Egress == nil {
		return
	}
	switch m.Kind {
	case KindEgressData:
		s.mu.Lock()
		if s.aborted || s.peerEOF {
			s.mu.Unlock()
			return
		}
		if s.queued+len(m.Bytes) > EgressWindow {
			s.mu.Unlock()
			s.Abort(fmt.Errorf("the peer sent more than the %d-byte window of stream %d", EgressWindow, s.id))
			return
		}
		s.queue = append(s.queue, m.Bytes)
		s.queued += len(m.Bytes)
		s.mu.Unlock()
		signal(s.wake)
	case KindEgressAck:
		s.mu.Lock()
		s.credit = min(s.credit+max(m.Egress.Ack, 0), EgressWindow)
		s.mu.Unlock()
		signal(s.credited)
	case KindEgressClose:
		if m.Egress.Abort {
			s.abort(errors.New(m.Error), false)
			return
		}
		s.mu.Lock()
		s.peerEOF = true
		s.mu.Unlock()
		signal(s.wake)
	}
}

// Abort ends the stream at once, both ways, telling the peer.
func (s *Stream) Abort(err error) { s.abort(err, true) }

func (s *Stream) abort(err error, tell bool) {
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		return
	}
	s.aborted, s.abortErr = true, err
	s.queue, s.queued = nil, 0
	close(s.gone)
	s.mu.Unlock()
	_ = s.local.Close()
	if tell {
		m := &Message{Kind: KindEgressClose, ID: s.msgID, Egress: &Egress{Stream: s.id, Abort: true}}
		if err != nil {
			m.Error = err.Error()
		}
		_ = s.conn.Send(m)
	}
}

// send reads local and sends its bytes while the peer has room for them.
func (s *Stream) send() {
	buf := s.conn.Chunk()
	defer s.conn.Recycle(buf)
	for {
		s.mu.Lock()
		credit, aborted := s.credit, s.aborted
		s.mu.Unlock()
		if aborted {
			return
		}
		if credit == 0 {
			select {
			case <-s.credited:
			case <-s.gone:
				return
			}
			continue
		}
		n, err := s.local.Read(buf[:min(len(buf), credit)])
		if n > 0 {
			s.mu.Lock()
			s.credit -= n
			s.mu.Unlock()
			if serr := s.conn.Send(&Message{Kind: KindEgressData, ID: s.msgID, Egress: &Egress{Stream: s.id}, Bytes: buf[:n]}); serr != nil {
				s.abort(serr, false)
				return
			}
		}
		if err != nil {
			var end interface{ EndsStream() bool }
			if errors.Is(err, io.EOF) || errors.As(err, &end) && end.EndsStream() {
				_ = s.conn.Send(&Message{Kind: KindEgressClose, ID: s.msgID, Egress: &Egress{Stream: s.id}})
				return
			}
			s.Abort(err)
			return
		}
	}
}

// receive writes the peer's bytes to local and acknowledges them once written, an
// EgressAckEvery at a time (each ack is a frame both processes between the daemon and the
// executor must carry), and closes local's writing side after the peer's last. The sender
// waits only with a full window unacknowledged, and once that much is written here an ack
// has gone, so the stream never stalls on an ack held back.
func (s *Stream) receive() {
	unacked := 0
	ack := func() bool {
		if unacked == 0 {
			return true
		}
		if err := s.conn.Send(&Message{Kind: KindEgressAck, ID: s.msgID, Egress: &Egress{Stream: s.id, Ack: unacked}}); err != nil {
			s.abort(err, false)
			return false
		}
		unacked = 0
		return true
	}
	for {
		s.mu.Lock()
		if s.aborted {
			s.mu.Unlock()
			return
		}
		if len(s.queue) == 0 {
			eof := s.peerEOF
			s.mu.Unlock()
			if eof {
				if cw, ok := s.local.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				return
			}
			select {
			case <-s.wake:
			case <-s.gone:
				return
			}
			continue
		}
		b := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		if _, err := s.local.Write(b); err != nil {
			s.Abort(err)
			return
		}
		s.conn.Recycle(b)
		s.mu.Lock()
		s.queued -= len(b)
		s.mu.Unlock()
		if unacked += len(b); unacked >= EgressAckEvery && !ack() {
			return
		}
	}
}
