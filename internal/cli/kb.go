package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

func (o *options) kbCommand() *cobra.Command {
	kb := &cobra.Command{Use: "kb", Short: "Load and read the knowledge agents' code reaches through agent.* (needs the daemon)",
		Long: `The knowledge store behind agent.search_memory, get_facts, query_graph and get_documents,
and the results runs store with agent.store_result. Kinds: memories ({"text", "metadata"}),
facts ({"subject", "predicate", "object", "metadata"}), documents ({"id", "title", "content",
"metadata"}), nodes ({"id", "type", "properties"}), edges ({"source", "target", "relation",
"properties"}) and results ({"key", "value"}).`}
	kb.AddCommand(o.kbImportCommand(), o.kbListCommand(), o.kbRmCommand())
	return kb
}

// kbKinds are the kinds of knowledge, as the --kind flags name them.
const kbKinds = "memories, facts, documents, nodes, edges or results"

func (o *options) kbImportCommand() *cobra.Command {
	var imp struct {
		daemonFlags
		kind string
	}
	importCmd := &cobra.Command{
		Use:     "import FILE.ndjson --kind KIND",
		Short:   "Import one JSON object per line as KIND, all or none (- reads standard input)",
		Example: `  sandpit kb import notes.ndjson --kind memories --agent alice`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if imp.kind == "" {
				return usageErrorf("--kind is required: %s", kbKinds)
			}
			var r io.Reader = o.env.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return usageErrorf("reading %s: %v", args[0], err)
				}
				defer f.Close()
				r = f
			}
			c, err := o.daemon(cmd, imp.daemonFlags)
			if err != nil {
				return err
			}
			n, err := c.ImportKnowledge(cmd.Context(), imp.agent, imp.kind, r)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.env.Stdout, "imported %d %s for agent %s\n", n, imp.kind, imp.agent)
			return nil
		},
	}
	imp.register(importCmd.Flags(), false)
	importCmd.Flags().StringVar(&imp.kind, "kind", "", kbKinds)
	return importCmd
}

func (o *options) kbListCommand() *cobra.Command {
	var list struct {
		daemonFlags
		kind, cursor string
		limit        int
	}
	listCmd := &cobra.Command{
		Use:   "list --kind KIND",
		Short: "Print the agent's items of KIND, one JSON object per line",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if list.kind == "" {
				return usageErrorf("--kind is required: %s", kbKinds)
			}
			c, err := o.daemon(cmd, list.daemonFlags)
			if err != nil {
				return err
			}
			items, next, err := c.ListKnowledge(cmd.Context(), list.agent, list.kind, apitype.Page{Limit: list.limit, Cursor: list.cursor})
			if err != nil {
				return err
			}
			for _, it := range items {
				fmt.Fprintln(o.env.Stdout, string(it))
			}
			if next != "" {
				fmt.Fprintf(o.env.Stderr, "sandpit: more: add --cursor %s\n", next)
			}
			return nil
		},
	}
	list.register(listCmd.Flags(), false)
	listCmd.Flags().StringVar(&list.kind, "kind", "", kbKinds)
	listCmd.Flags().IntVar(&list.limit, "limit", 100, "at most this many (1 to 500)")
	listCmd.Flags().StringVar(&list.cursor, "cursor", "", "continue after an earlier page")
	return listCmd
}

func (o *options) kbRmCommand() *cobra.Command {
	var rm struct {
		daemonFlags
		kind string
	}
	rmCmd := &cobra.Command{
		Use:   "rm --kind KIND ID",
		Short: "Delete one item (results: the key with every version)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rm.kind == "" {
				return usageErrorf("--kind is required: %s", kbKinds)
			}
			c, err := o.daemon(cmd, rm.daemonFlags)
			if err != nil {
				return err
			}
			if err := c.DeleteKnowledge(cmd.Context(), rm.agent, rm.kind, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(o.env.Stdout, "deleted %s %s\n", rm.kind, args[0])
			return nil
		},
	}
	rm.register(rmCmd.Flags(), false)
	rmCmd.Flags().StringVar(&rm.kind, "kind", "", kbKinds)
	return rmCmd
}
