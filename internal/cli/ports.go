package cli

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A session's ports from the command line (docs/ports.md): what listens, the requests the
// ledger recorded, and share links: ports, share, shares, unshare.

// withShareID checks, after the session ID, that the second argument is a share ID (sh_ and
// 26 characters): another name would change the route it is sent on.
func withShareID(args cobra.PositionalArgs) cobra.PositionalArgs {
	return withSessionID(func(cmd *cobra.Command, a []string) error {
		if len(a) > 1 && !sandbox.ValidShareID(a[1]) {
			return usageErrorf("%.80q is not a share ID: give the sh_… ID that sandpit session share printed (sandpit session shares %s lists them)", a[1], a[0])
		}
		return args(cmd, a)
	})
}

// portArg reads a port argument: 1 to 65535.
func portArg(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, usageErrorf("%.80q is not a port: give the TCP port the session's server listens on, 1 to 65535 (sandpit session ports ID lists them)", s)
	}
	return p, nil
}

func (o *options) sessionPortsCommand() *cobra.Command {
	var (
		f        daemonFlags
		requests bool
		limit    int
		cursor   string
	)
	cmd := &cobra.Command{
		Use:   "ports ID",
		Short: "List the TCP ports a session's servers listen on, each with the daemon's URL that reaches it (--requests: the requests sent to them)",
		Long: `List the TCP ports the processes of session ID listen on, each with the URL of the daemon that
forwards to it (the path form, behind the daemon's token). With --requests, list instead the
requests the ledger recorded to the session's ports, newest first (also once it has ended).
A server must listen on 127.0.0.1, ::1, 0.0.0.0 or :: inside the sandbox.`,
		Example: `  sandpit session exec --background $S -- python3 -m http.server 8000
  sandpit session ports $S
  sandpit session ports $S --requests --limit 10`,
		Args: withSessionID(exactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if requests && (limit < 1 || limit > apitype.MaxLimit) {
				return usageErrorf("--limit %d: give 1 to %d", limit, apitype.MaxLimit)
			}
			if !requests && (cmd.Flags().Changed("limit") || cursor != "") {
				return usageErrorf("--limit and --cursor page the ledger's requests: give --requests with them")
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			if requests {
				list, next, err := c.PortRequests(cmd.Context(), f.agent, args[0], apitype.Page{Limit: limit, Cursor: cursor})
				if err != nil {
					return err
				}
				if f.json {
					return o.printJSON(apitype.PortRequestList{Requests: list, NextCursor: next})
				}
				if len(list) == 0 && cursor == "" {
					fmt.Fprintf(o.env.Stdout, "session %s's ports have had no request\n", args[0])
					return nil
				}
				tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "STARTED\tPORT\tMETHOD\tSTATUS\tDURATION\tIN\tOUT\tCLIENT\tPATH")
				for _, q := range list {
					status := strconv.Itoa(q.Status)
					if q.Error != "" {
						status += " (" + oneLine(q.Error, 60) + ")"
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%dms\t%d\t%d\t%s\t%s\n", q.StartedAt.Local().Format(time.DateTime), q.Port, q.Method, status,
						q.DurationMS, q.BytesIn, q.BytesOut, q.Client, oneLine(q.Path, 80))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if next != "" {
					fmt.Fprintf(o.env.Stderr, "sandpit: more: add --cursor %s\n", next)
				}
				return nil
			}
			list, err := c.Ports(cmd.Context(), f.agent, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(apitype.PortList{Ports: list})
			}
			if len(list) == 0 {
				fmt.Fprintf(o.env.Stdout, "nothing listens in session %s (a server must listen on 127.0.0.1, ::1, 0.0.0.0 or ::)\n", args[0])
				return nil
			}
			base := strings.TrimSuffix(o.daemonURL(f.url), "/")
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PORT\tADDRESS\tURL")
			for _, p := range list {
				fmt.Fprintf(tw, "%d\t%s\t%s\n", p.Port, p.Address, base+p.Path)
			}
			return tw.Flush()
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().BoolVar(&requests, "requests", false, "list the requests the ledger recorded to the session's ports instead")
	cmd.Flags().IntVar(&limit, "limit", 50, "with --requests: at most this many")
	cmd.Flags().StringVar(&cursor, "cursor", "", "with --requests: the next_cursor of an earlier page (see --json)")
	return cmd
}

func (o *options) sessionShareCommand() *cobra.Command {
	var (
		f   daemonFlags
		ttl time.Duration
	)
	cmd := &cobra.Command{
		Use:   "share ID PORT",
		Short: "Make a link that opens a session's port in a browser without the daemon's token (prints the link)",
		Long: `Make a share link of port PORT of session ID: whoever opens it in a browser reaches that port's
server until --ttl passes, until it is revoked (sandpit session unshare ID SHARE), or until the
session ends. The link (on stdout) holds a secret the daemon does not keep: it is printed once.
The share's ID and expiry go to stderr. Needs the daemon's public_host when it listens beyond
loopback.`,
		Example: `  URL=$(sandpit session share $S 8000 --ttl 30m)
  sandpit session shares $S
  sandpit session unshare $S sh_...`,
		Args: withSessionID(exactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := portArg(args[1])
			if err != nil {
				return err
			}
			r := apitype.ShareRequest{Port: port}
			if cmd.Flags().Changed("ttl") {
				if ttl < time.Second || ttl%time.Millisecond != 0 {
					return usageErrorf("--ttl %s: give at least 1s, in whole milliseconds (such as 30m or 2h)", ttl)
				}
				ms := ttl.Milliseconds()
				r.TTLMS = &ms
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			sh, err := c.CreateShare(cmd.Context(), f.agent, args[0], r)
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(sh)
			}
			fmt.Fprintln(o.env.Stdout, sh.URL)
			fmt.Fprintf(o.env.Stderr, "share %s of port %d, until %s (sandpit session unshare %s %s revokes it)\n",
				sh.ID, sh.Port, sh.ExpiresAt.Local().Format(time.DateTime), args[0], sh.ID)
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "how long the link works, 1s up to the session's lifetime (default 1h, or the session's lifetime when shorter)")
	return cmd
}

func (o *options) sessionSharesCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "shares ID",
		Short: "List a session's share links that still work (without their secrets)",
		Args:  withSessionID(exactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			list, err := c.Shares(cmd.Context(), f.agent, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(apitype.ShareList{Shares: list})
			}
			if len(list) == 0 {
				fmt.Fprintf(o.env.Stdout, "session %s has no share (sandpit session share %s PORT makes one)\n", args[0], args[0])
				return nil
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPORT\tCREATED\tEXPIRES")
			for _, sh := range list {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", sh.ID, sh.Port, sh.CreatedAt.Local().Format(time.DateTime), sh.ExpiresAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (o *options) sessionUnshareCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "unshare ID SHARE",
		Short: "Revoke a session's share link: it stops working at once, also in a browser that opened it",
		Args:  withShareID(exactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			if err := c.RevokeShare(cmd.Context(), f.agent, args[0], args[1]); err != nil {
				return err
			}
			if f.json {
				return o.printJSON(map[string]string{"revoked": args[1]})
			}
			fmt.Fprintf(o.env.Stderr, "revoked share %s\n", args[1])
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (o *options) sessionEgressCommand() *cobra.Command {
	var (
		f      daemonFlags
		limit  int
		cursor string
	)
	cmd := &cobra.Command{
		Use:   "egress ID",
		Short: "List the outbound connections of a session's commands, newest first (from the ledger: also once it has ended)",
		Long: `List the outbound connections (network "allowlist") the ledger recorded for the commands of
session ID and for what its calls left running (a thread, a background process), allowed or
refused, as each ended. A call's own connections are in its execution's record (sandpit exec
show).`,
		Args: withSessionID(exactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > apitype.MaxLimit {
				return usageErrorf("--limit %d: give 1 to %d", limit, apitype.MaxLimit)
			}
			c, err := o.daemon(cmd, f)
			if err != nil {
				return err
			}
			list, next, err := c.SessionEgress(cmd.Context(), f.agent, args[0], apitype.Page{Limit: limit, Cursor: cursor})
			if err != nil {
				return err
			}
			if f.json {
				return o.printJSON(apitype.EgressList{Connections: list, NextCursor: next})
			}
			if len(list) == 0 && cursor == "" {
				fmt.Fprintf(o.env.Stdout, "session %s's commands have made no connection\n", args[0])
				return nil
			}
			tw := tabwriter.NewWriter(o.env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "STARTED\tDESTINATION\tALLOWED\tSENT\tRECEIVED\tDURATION\tRULE OR REASON")
			for _, e := range list {
				why := e.Rule
				if !e.Allowed || e.Reason != "" {
					why = e.Reason
				}
				fmt.Fprintf(tw, "%s\t%s\t%t\t%d\t%d\t%dms\t%s\n", e.StartedAt.Local().Format(time.DateTime), oneLine(net.JoinHostPort(e.Host, strconv.Itoa(e.Port)), 80),
					e.Allowed, e.BytesSent, e.BytesReceived, e.DurationMS, oneLine(why, 80))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(o.env.Stderr, "sandpit: more: add --cursor %s\n", next)
			}
			return nil
		},
	}
	f.register(cmd.Flags(), true)
	cmd.Flags().IntVar(&limit, "limit", 50, "at most this many")
	cmd.Flags().StringVar(&cursor, "cursor", "", "the next_cursor of an earlier page (see --json)")
	return cmd
}
