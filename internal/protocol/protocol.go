// Package protocol is the wire format of the control line between the sandpit daemon and
// sandpit-executor inside the container: length-prefixed JSON frames over one byte stream (the
// stdin and stdout of a `docker exec`, or a net.Pipe in tests).
//
// A frame is a 4-byte big-endian length followed by that many bytes of a JSON Message (or of
// one of the two binary bodies, for a connection's bytes and for a file's: see Send). Frames
// are at most MaxFrame bytes. The executor speaks first (KindHello); then the daemon sends
// KindRun and KindCancel, and the executor answers each run with KindStdout/KindStderr chunks in
// order, then KindFile for each output file (in name order), and exactly one KindResult (or
// KindRefused when it cannot start the run). After a run's result, once the run's files are
// gone, it sends KindSettled for its slot: the slot takes no run before that.
//
// This package uses only the standard library and internal/sandbox, because the executor (a
// static binary in the container) imports it.
package protocol

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Version is the protocol version; the daemon refuses an executor that speaks another.
// Version 3: runs carry input files and the charts switch, and their output files come back
// as KindFile messages. Version 4: the egress proxy's connections (KindEgress*). Version 5: a
// session's commands (KindCommand, KindProc*) and files by path (KindFile*); displays and
// values (KindDisplay), the result's error and execution count. Version 7: a session's ports
// (KindPortOpen, KindPortOpened, KindPortList, KindPortListed). Version 8: a background
// command's output stays in the box unless a reader is attached (KindProcAttach,
// KindProcDetach, KindProcTail; the tail in KindProcEnded). Version 9: a session's directory
// watchers (KindWatch, KindWatchStarted, KindWatchEvents, KindUnwatch, KindWatchEnded).
// Version 10: a file's bytes travel after the message's JSON, not in it (blobFrame).
const Version = 10

// MaxFrame is the largest frame either side sends or accepts, in bytes. A run's code and input
// (1 MiB each by default) must fit in one KindRun frame.
const MaxFrame = 64 << 20

// Kind names a message type.
type Kind string

// Message kinds.
const (
	KindHello   Kind = "hello"   // executor → daemon, once, first
	KindRun     Kind = "run"     // daemon → executor: start Run
	KindCancel  Kind = "cancel"  // daemon → executor: kill run ID
	KindStdout  Kind = "stdout"  // executor → daemon: a chunk of run ID's stdout in Data
	KindStderr  Kind = "stderr"  // executor → daemon: a chunk of run ID's stderr in Data
	KindFile    Kind = "file"    // executor → daemon: an output file of run ID (File, FileContent), before its result
	KindDisplay Kind = "display" // executor → daemon: a display or the last expression's value of run ID (Display), in order with its streams
	KindResult  Kind = "result"  // executor → daemon: run ID ended
	KindRefused Kind = "refused" // executor → daemon: run ID was not started; Error says why
	KindSettled Kind = "settled" // executor → daemon: Slot's last run is cleaned up and it takes the next (Error: the cleanup failed)
	KindPing    Kind = "ping"    // daemon → executor: are you alive? (ID is a sequence number)
	KindPong    Kind = "pong"    // executor → daemon: the answer to the ping with the same ID

	KindCall  Kind = "call"  // executor → daemon: run ID's program made an agent.* call (AgentCall)
	KindReply Kind = "reply" // daemon → executor: the answer to run ID's call (AgentReply)

	KindInstall        Kind = "install"         // daemon → executor: make Install's requirements importable
	KindInstallStatus  Kind = "install_status"  // executor → daemon: one requirement of install ID decided (Dependency)
	KindInstalled      Kind = "installed"       // executor → daemon: install ID ended (Installed, or Error)
	KindPackages       Kind = "packages"        // daemon → executor: list or remove installed packages
	KindPackagesResult Kind = "packages_result" // executor → daemon: the answer to packages ID (PackageList, or Error)

	// The egress proxy (network "allowlist"; see Stream). ID is the run's or install's ID.
	KindEgressOpen   Kind = "egress_open"   // executor → daemon: run ID's program asks for Egress.Host:Egress.Port as Egress.Stream
	KindEgressOpened Kind = "egress_opened" // daemon → executor: Egress.Stream is connected, or refused (Egress.Refused, Error: why)
	KindEgressData   Kind = "egress_data"   // both ways: Bytes of Egress.Stream
	KindEgressAck    Kind = "egress_ack"    // both ways: the receiver has passed on Egress.Ack more bytes of Egress.Stream
	KindEgressClose  Kind = "egress_close"  // both ways: the sender sends no more on Egress.Stream (Egress.Abort: the stream is gone)

	// A session's commands (session executors only). ID is the process's ID; its output comes
	// as KindStdout and KindStderr chunks with that ID, between KindProcStarted and
	// KindProcEnded. The daemon's KindProcInput, KindProcSignal and KindProcResize name the
	// process in their struct and have IDs of their own, which the KindProcAck that answers
	// each carries (Error: why not).
	KindCommand     Kind = "command"      // daemon → executor: start Command as process ID
	KindProcStarted Kind = "proc_started" // executor → daemon: process ID runs (ProcStarted), or did not start (Error)
	KindProcEnded   Kind = "proc_ended"   // executor → daemon: process ID ended (ProcEnded), after its last output
	KindProcInput   Kind = "proc_input"   // daemon → executor: ProcInput for process ID
	KindProcSignal  Kind = "proc_signal"  // daemon → executor: ProcSignal for process ID
	KindProcResize  Kind = "proc_resize"  // daemon → executor: ProcResize for process ID's terminal
	KindProcAck     Kind = "proc_ack"     // executor → daemon: the input, signal, resize, attach or detach of ID was done (or Error, ErrorClass)

	// A background command (sandbox.CommandSpec.Background) keeps its latest output in the box
	// (sandbox.ProcessTailBytes per stream) and sends it as KindStdout and KindStderr chunks
	// only while the daemon has a reader attached; its KindProcEnded carries what the box kept
	// (ProcTail, Reader ""). A foreground command's output is always sent.
	KindProcAttach Kind = "proc_attach" // daemon → executor: ProcAttach: reader Reader reads process Proc's output from now on
	KindProcDetach Kind = "proc_detach" // daemon → executor: ProcAttach: reader Reader reads process Proc's output no more
	KindProcTail   Kind = "proc_tail"   // executor → daemon: ProcTail of process ID for the reader that attached, before any later chunk

	// A session's files by path (session executors only); each request is answered by one
	// KindFileReply with its ID.
	KindFileRead   Kind = "file_read"   // daemon → executor: FileRead
	KindFileWrite  Kind = "file_write"  // daemon → executor: FileWrite
	KindFileList   Kind = "file_list"   // daemon → executor: FileList
	KindFileStat   Kind = "file_stat"   // daemon → executor: FileStat
	KindFileMkdir  Kind = "file_mkdir"  // daemon → executor: FileMkdir
	KindFileRename Kind = "file_rename" // daemon → executor: FileRename
	KindFileRemove Kind = "file_remove" // daemon → executor: FileRemove
	KindFileReply  Kind = "file_reply"  // executor → daemon: FileReply (or Error, ErrorClass)

	// A session's ports (session executors only), reached from outside through the daemon: it
	// asks for a connection to a port on the box's loopback as a stream whose number has
	// PortStreamBit set (the executor numbers its own streams without it). The stream's bytes
	// then travel as the egress proxy's do (KindEgressData, KindEgressAck, KindEgressClose),
	// with ID PortOwner.
	KindPortOpen   Kind = "port_open"   // daemon → executor: connect Egress.Stream to Egress.Port on the box's loopback
	KindPortOpened Kind = "port_opened" // executor → daemon: Egress.Stream is connected, or refused (Egress.Refused, Error: why)
	KindPortList   Kind = "port_list"   // daemon → executor: which of the session's ports listen?
	KindPortListed Kind = "port_listed" // executor → daemon: the answer to port_list ID (Ports, or Error)

	// A session's directory watchers (session executors only): the box watches with inotify
	// and sends each change as it happens. ID is the watcher's ID.
	KindWatch        Kind = "watch"         // daemon → executor: watch Watch as watcher ID
	KindWatchStarted Kind = "watch_started" // executor → daemon: watcher ID watches, or does not (Error, ErrorClass)
	KindWatchEvents  Kind = "watch_events"  // executor → daemon: WatchEvents of watcher ID, in order
	KindUnwatch      Kind = "unwatch"       // daemon → executor: stop watcher ID
	KindWatchEnded   Kind = "watch_ended"   // executor → daemon: watcher ID sends no more (Error: why, when not asked to stop)
)

// PortStreamBit marks the number of a stream the daemon opened to a session's port
// (KindPortOpen); PortOwner is the ID of its messages.
const (
	PortStreamBit uint64 = 1 << 63
	PortOwner            = "port"
)

// IsFileOp reports whether k is one of the daemon's file requests (KindFileRead …
// KindFileRemove).
func (k Kind) IsFileOp() bool {
	switch k {
	case KindFileRead, KindFileWrite, KindFileList, KindFileStat, KindFileMkdir, KindFileRename, KindFileRemove:
		return true
	}
	return false
}

// IsEgress reports whether k is one of the egress proxy's kinds (KindEgress*).
func (k Kind) IsEgress() bool {
	switch k {
	case KindEgressOpen, KindEgressOpened, KindEgressData, KindEgressAck, KindEgressClose:
		return true
	}
	return false
}

// The states of the executor's fork server (Message.Fork).
const (
	ForkReady    = "ready"    // runs start as forks of a server that has imported the preload
	ForkStarting = "starting" // a server is starting (importing the preload): runs start cold
	ForkOff      = "off"      // no server will be used (fork_server false, or it cannot be)
)

// Message is one frame's content. Which fields are set depends on Kind.
type Message struct {
	Kind   Kind            `json:"kind"`
	ID     string          `json:"id,omitempty"`
	Hello  *Hello          `json:"hello,omitempty"`
	Run    *Run            `json:"run,omitempty"`
	Data   string          `json:"data,omitempty"`
	Result *sandbox.Result `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// File and FileContent are a KindFile message's output file and its bytes (after the JSON
	// in the frame: see blobFrame); a file's content is at most sandbox.Limits.OutputFileBytes.
	File        *sandbox.File `json:"file,omitempty"`
	FileContent []byte        `json:"file_content,omitempty"`
	// Display is a KindDisplay message's display.
	Display *sandbox.Display `json:"display,omitempty"`
	// Slot is the slot a KindSettled message is about.
	Slot int `json:"slot,omitempty"`
	// Fork answers a KindPing with whether runs start from a fork server now: ForkReady,
	// ForkStarting, or ForkOff (then Error says why); "" from an older executor.
	Fork string `json:"fork,omitempty"`

	AgentCall  *AgentCall  `json:"agent_call,omitempty"`
	AgentReply *AgentReply `json:"agent_reply,omitempty"`

	Install     *Install                  `json:"install,omitempty"`
	Dependency  *sandbox.DependencyStatus `json:"dependency,omitempty"`
	Installed   *sandbox.Installed        `json:"installed,omitempty"`
	Packages    *Packages                 `json:"packages,omitempty"`
	PackageList []Package                 `json:"package_list,omitempty"`

	Egress *Egress `json:"egress,omitempty"`

	// A session's commands: one struct per operation.
	Command     *Command            `json:"command,omitempty"`
	ProcStarted *ProcStarted        `json:"proc_started,omitempty"`
	ProcEnded   *sandbox.ProcessEnd `json:"proc_ended,omitempty"`
	ProcInput   *ProcInput          `json:"proc_input,omitempty"`
	ProcSignal  *ProcSignal         `json:"proc_signal,omitempty"`
	ProcResize  *ProcResize         `json:"proc_resize,omitempty"`
	ProcAttach  *ProcAttach         `json:"proc_attach,omitempty"`
	// ProcTail is what the box kept of a background command's output: a KindProcTail
	// message's, or a KindProcEnded message's at the command's end.
	ProcTail *sandbox.ProcessTail `json:"proc_tail,omitempty"`

	// A session's files: one struct per operation, and the reply.
	FileRead   *sandbox.FileRead   `json:"file_read,omitempty"`
	FileWrite  *sandbox.FileWrite  `json:"file_write,omitempty"`
	FileList   *sandbox.FileList   `json:"file_list,omitempty"`
	FileStat   *sandbox.FileStat   `json:"file_stat,omitempty"`
	FileMkdir  *sandbox.FileMkdir  `json:"file_mkdir,omitempty"`
	FileRename *sandbox.FileRename `json:"file_rename,omitempty"`
	FileRemove *sandbox.FileRemove `json:"file_remove,omitempty"`
	FileReply  *FileReply          `json:"file_reply,omitempty"`
	// ErrorClass is the class of Error in a KindProcAck or KindFileReply (errclass's names:
	// "invalid", "not found", "conflict", "too large"; "" for an internal failure).
	ErrorClass string `json:"error_class,omitempty"`

	// Ports answers KindPortList: the session's listening ports, by port.
	Ports []sandbox.ListeningPort `json:"ports,omitempty"`

	// Watch is a KindWatch's directory; WatchEvents a KindWatchEvents' changes.
	Watch       *sandbox.WatchSpec   `json:"watch,omitempty"`
	WatchEvents []sandbox.WatchEvent `json:"watch_events,omitempty"`

	// Bytes are a KindEgressData message's bytes, at most EgressChunk. Such a message travels
	// as a binary frame (see dataFrame), without ID.
	Bytes []byte `json:"bytes,omitempty"`
}

// Egress is a KindEgress* message's stream header.
type Egress struct {
	// Stream numbers the connection within the session (chosen by the executor; by the
	// daemon, with PortStreamBit, for a port's).
	Stream uint64 `json:"stream"`
	// Host and Port are the destination a program asked the proxy for (KindEgressOpen); Port
	// alone the session's port the daemon asks for (KindPortOpen).
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
	// Refused and Address answer KindEgressOpen: refused (Message.Error says why, as the
	// proxy's 403 text), or connected to Address.
	Refused bool   `json:"refused,omitempty"`
	Address string `json:"address,omitempty"`
	// Ack is a KindEgressAck message's count of bytes passed on.
	Ack int `json:"ack,omitempty"`
	// Abort makes a KindEgressClose end both directions at once (an error, a cap, the run's end).
	Abort bool `json:"abort,omitempty"`
}

// AgentCall is a program's agent.* call; Seq numbers the run's calls.
type AgentCall struct {
	Seq int64 `json:"seq"`
	sandbox.Call
}

// AgentReply answers the call Seq: Value when OK, else Error (raised as agent.Error).
type AgentReply struct {
	Seq   int64           `json:"seq"`
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value,omitempty"`
	Error string          `json:"error,omitempty"`
}

// Install asks the executor to make requirements importable, installing what is missing with
// pip as the installer user.
type Install struct {
	Request sandbox.InstallRequest `json:"request"`
	Pip     PipOptions             `json:"pip"`
}

// PipOptions are the daemon's pip settings, from its configuration (never from a request).
type PipOptions struct {
	// IndexURL replaces PyPI ("" keeps pip's default); ExtraIndexURLs are searched too.
	IndexURL       string   `json:"index_url,omitempty"`
	ExtraIndexURLs []string `json:"extra_index_urls,omitempty"`
	// TrustedHosts are hosts pip may reach over plain HTTP or with a bad certificate.
	TrustedHosts []string `json:"trusted_hosts,omitempty"`
	// BinaryOnly refuses source distributions (no builds).
	BinaryOnly bool `json:"binary_only,omitempty"`
}

// Packages asks for the installed packages (Op "list") or removes one (Op "remove", Name).
type Packages struct {
	Op   string `json:"op"`
	Name string `json:"name,omitempty"`
}

// Package is one installed package directory: a requirement installed with its own
// dependencies.
type Package struct {
	// Name is the PEP 503 normalised name; Version the installed version.
	Name    string `json:"name"`
	Version string `json:"version"`
	// Requirement is the requirement it was installed for.
	Requirement string `json:"requirement"`
	// SizeBytes is the size of its directory (with the dependencies installed with it); 0 for
	// a package within another's directory, whose size counts it.
	SizeBytes   int64     `json:"size_bytes"`
	InstalledAt time.Time `json:"installed_at"`
	// Within names the package whose install brought this one (a dependency of it, in its
	// directory: satisfying requirements, removed with it); absent for one installed itself.
	Within string `json:"within,omitempty"`
}

// Command starts a session's command (see sandbox.CommandSpec) with the daemon's pip settings,
// so that `pip install` in it reaches the package index as the session's dependencies do.
type Command struct {
	Spec sandbox.CommandSpec `json:"spec"`
	Pip  PipOptions          `json:"pip"`
}

// ProcStarted says a command's process runs, with its PID in the box.
type ProcStarted struct {
	PID int `json:"pid"`
}

// ProcInput writes Data to process Proc's standard input (or terminal), then closes its
// standard input when Close is set.
type ProcInput struct {
	Proc  string `json:"proc"`
	Data  []byte `json:"data,omitempty"`
	Close bool   `json:"close,omitempty"`
}

// ProcSignal sends process Proc (its process group) a signal, by name (sandbox.Signals).
type ProcSignal struct {
	Proc   string `json:"proc"`
	Signal string `json:"signal"`
}

// ProcResize sets the size of process Proc's terminal.
type ProcResize struct {
	Proc string           `json:"proc"`
	Size sandbox.TermSize `json:"size"`
}

// ProcAttach attaches reader Reader to process Proc (KindProcAttach: with the output kept
// when Tail is set) or detaches it (KindProcDetach).
type ProcAttach struct {
	Proc   string `json:"proc"`
	Reader string `json:"reader"`
	Tail   bool   `json:"tail,omitempty"`
}

// FileReply answers a file request: Entry for a read, write, stat, mkdir or rename (the
// path's new state), Content for a read, Listing for a list.
type FileReply struct {
	Entry *sandbox.FileEntry `json:"entry,omitempty"`
	// Content is a read's bytes (after the JSON in the frame: see blobFrame).
	Content []byte               `json:"content,omitempty"`
	Listing *sandbox.FileListing `json:"listing,omitempty"`
}

// Hello is the executor's greeting.
type Hello struct {
	Version int `json:"version"`
	// Slots is how many slots the executor serves (slot numbers 0 to Slots-1).
	Slots int `json:"slots"`
	// Python is the interpreter's version ("3.11.2").
	Python string `json:"python"`
	// PID is the executor's process ID inside the container.
	PID int `json:"pid"`
}

// Run asks the executor to run Spec in Slot.
type Run struct {
	Slot int          `json:"slot"`
	Spec sandbox.Spec `json:"spec"`
}

// ErrFrameTooLarge is returned for a frame over MaxFrame bytes.
var ErrFrameTooLarge = errors.New("protocol: frame too large")

// Conn reads and writes Messages. Send is safe for concurrent use; Receive must be called
// from one goroutine.
type Conn struct {
	r       *bufio.Reader
	mu      sync.Mutex
	w       io.Writer
	dataBuf []byte // a KindEgressData frame of up to EgressChunk bytes is built here (under mu)
	// chunks holds spare EgressChunk-sized buffers for the bytes of KindEgressData messages
	// received and of a Stream's reads (see Chunk, Recycle): a connection's bytes then cost
	// no allocation (and no zeroing, no collection) per chunk.
	chunks chan []byte
}

// spareChunks is how many spare chunk buffers a Conn keeps (EgressChunk bytes each).
const spareChunks = 32

// NewConn returns a Conn reading frames from r and writing them to w.
func NewConn(r io.Reader, w io.Writer) *Conn {
	return &Conn{r: bufio.NewReaderSize(r, 64<<10), w: w, dataBuf: make([]byte, 0, 4+9+EgressChunk),
		chunks: make(chan []byte, spareChunks)}
}

// Chunk returns a buffer of EgressChunk bytes (not zeroed), a spare one when there is one.
func (c *Conn) Chunk() []byte {
	select {
	case b := <-c.chunks:
		return b[:EgressChunk]
	default:
		return make([]byte, EgressChunk)
	}
}

// Recycle gives back b, the Bytes of a KindEgressData message this Conn received or a buffer
// from Chunk, once nothing refers to it any more. Other slices are ignored.
func (c *Conn) Recycle(b []byte) {
	if cap(b) != EgressChunk {
		return
	}
	select {
	case c.chunks <- b:
	default:
	}
}

// dataFrame marks a frame whose body is a KindEgressData message in binary: the marker, the
// stream number (8 bytes, big-endian), then the bytes. Every other frame's body is JSON, whose
// first byte is '{'.
const dataFrame = 0x00

// blobFrame marks a frame whose body is a message with a file's bytes: the marker, the length
// of the message's JSON (4 bytes, big-endian), the JSON without the bytes, then the bytes. A
// file's bytes in JSON are base64 that both sides encode and scan, about ten times the CPU
// of this frame's copies on the CI machine (BenchmarkFileFrame: 1 MiB sent and received).
const blobFrame = 0x01

// blob returns where m keeps a file's bytes (a KindFile message's FileContent, a
// KindFileWrite's FileWrite.Content, a KindFileReply's FileReply.Content), nil for a message
// without such a place.
func (m *Message) blob() *[]byte {
	switch {
	case m.Kind == KindFile:
		return &m.FileContent
	case m.Kind == KindFileWrite && m.FileWrite != nil:
		return &m.FileWrite.Content
	case m.Kind == KindFileReply && m.FileReply != nil:
		return &m.FileReply.Content
	}
	return nil
}

// withoutBlob returns m without its file's bytes, as a copy, and the bytes; m itself and nil
// when it carries none.
func withoutBlob(m *Message) (*Message, []byte) {
	if p := m.blob(); p == nil || len(*p) == 0 {
		return m, nil
	}
	c := *m
	if c.FileWrite != nil {
		w := *c.FileWrite
		c.FileWrite = &w
	}
	if c.FileReply != nil {
		r := *c.FileReply
		c.FileReply = &r
	}
	p := c.blob()
	b := *p
	*p = nil
	return &c, b
}

// Send writes m as one frame: a KindEgressData message as a data frame, a message with a
// file's bytes as a blob frame, any other as JSON.
func (c *Conn) Send(m *Message) error {
	if m.Kind == KindEgressData && m.Egress != nil {
		// The connections' bytes travel as they are: no JSON, no base64.
		if 9+len(m.Bytes) > MaxFrame {
			return fmt.Errorf("%w: %d bytes of stream data", ErrFrameTooLarge, len(m.Bytes))
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		// One write per frame (a pipe's reader must not wake for a header alone), from a
		// buffer kept for a chunk's frame rather than one allocated each time.
		frame := c.dataBuf[:0]
		if 4+9+len(m.Bytes) > cap(frame) {
			frame = make([]byte, 0, 4+9+len(m.Bytes))
		}
		frame = binary.BigEndian.AppendUint32(frame, uint32(9+len(m.Bytes)))
		frame = append(frame, dataFrame)
		frame = binary.BigEndian.AppendUint64(frame, m.Egress.Stream)
		frame = append(frame, m.Bytes...)
		_, err := c.w.Write(frame)
		return err
	}
	m, blob := withoutBlob(m)
	// Without HTML escaping: '<' in OUTPUT must not become six bytes on its way to the client.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return fmt.Errorf("protocol: encoding %s message: %w", m.Kind, err)
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	n := len(body)
	if blob != nil {
		n = 1 + 4 + len(body) + len(blob)
	}
	if n > MaxFrame {
		return fmt.Errorf("%w: %s message is %d bytes, the limit is %d", ErrFrameTooLarge, m.Kind, n, MaxFrame)
	}
	frame := make([]byte, 0, 4+5+len(body))
	frame = binary.BigEndian.AppendUint32(frame, uint32(n))
	if blob != nil {
		frame = append(frame, blobFrame)
		frame = binary.BigEndian.AppendUint32(frame, uint32(len(body)))
	}
	frame = append(frame, body...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if blob == nil {
		_, err := c.w.Write(frame)
		return err
	}
	// The file's bytes are written from where they are (one writev on a connection).
	bufs := net.Buffers{frame, blob}
	_, err := bufs.WriteTo(c.w)
	return err
}

// Receive reads the next frame. It returns io.EOF when the stream ends cleanly between frames.
// A KindEgressData message's Bytes may be given back with Recycle.
func (c *Conn) Receive() (*Message, error) {
	if m, err := c.receiveData(); m != nil || err != nil {
		return m, err
	}
	body, err := ReadFrame(c.r)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 && body[0] == dataFrame {
		if len(body) < 9 {
			return nil, errors.New("protocol: a stream data frame shorter than its header")
		}
		return &Message{Kind: KindEgressData, Egress: &Egress{Stream: binary.BigEndian.Uint64(body[1:9])}, Bytes: body[9:]}, nil
	}
	var blob []byte
	if len(body) > 0 && body[0] == blobFrame {
		if len(body) < 5 || binary.BigEndian.Uint32(body[1:5]) > uint32(len(body)-5) {
			return nil, errors.New("protocol: a file frame shorter than its header says")
		}
		n := 5 + int(binary.BigEndian.Uint32(body[1:5]))
		body, blob = body[5:n], body[n:]
	}
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("protocol: decoding message: %w", err)
	}
	if m.Kind == "" {
		return nil, errors.New("protocol: message without kind")
	}
	if blob != nil {
		p := m.blob()
		if p == nil {
			return nil, fmt.Errorf("protocol: a %s message came with a file's bytes it has no place for", m.Kind)
		}
		*p = blob
	}
	return &m, nil
}

// receiveData reads the next frame into a chunk buffer when it is a data frame of at most
// EgressChunk bytes; otherwise it reads nothing and returns nil, nil (ReadFrame then reads
// the frame, and reports what is wrong with it). It peeks no further than the frame's own
// bytes, so a short frame is never held waiting for the next one.
func (c *Conn) receiveData() (*Message, error) {
	head, err := c.r.Peek(4)
	if err != nil {
		return nil, nil
	}
	n := int(binary.BigEndian.Uint32(head))
	if n < 9 || n-9 > EgressChunk {
		return nil, nil
	}
	head, err = c.r.Peek(4 + 9)
	if err != nil || head[4] != dataFrame {
		return nil, nil
	}
	stream := binary.BigEndian.Uint64(head[5:])
	if _, err := c.r.Discard(4 + 9); err != nil {
		return nil, err
	}
	b := c.Chunk()[:n-9]
	if _, err := io.ReadFull(c.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return &Message{Kind: KindEgressData, Egress: &Egress{Stream: stream}, Bytes: b}, nil
}

// ReadFrame reads one length-prefixed frame from r. It returns io.EOF at a clean end of
// stream, io.ErrUnexpectedEOF for a stream cut inside a frame, and ErrFrameTooLarge for a
// declared length over MaxFrame (without reading the body).
func ReadFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrame {
		return nil, fmt.Errorf("%w: declared %d bytes, the limit is %d", ErrFrameTooLarge, n, MaxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}
