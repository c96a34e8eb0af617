package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/names"
)

// Checks of the names and cursors on a command line, made before the
// connection with the library's own rules (internal/names): a name the
// library would refuse is refused at once, exit 2, naming the word or flag
// the operator typed, with the database down or its URL broken, and
// nothing names a database first.

// nameArgs says what each command's positional words name: the first
// word only, or (all) every word. lock, elect and queue lock check theirs
// once split from the command after -- (checkName, checkNames).
var nameArgs = map[string]struct {
	word string // KEY, GROUP, RESOURCE, or IDEMKEY (an Idempotency-Key, shown as KEY)
	all  bool
}{
	"sentinel inspect": {"KEY", false}, "sentinel history": {"KEY", false}, "sentinel reconcile": {"KEY", false},
	"sentinel force-complete": {"KEY", false}, "sentinel reset": {"KEY", false}, "sentinel set-result": {"KEY", false},
	"sentinel follow": {"KEY", true},
	"sentinel leader": {"GROUP", false}, "sentinel members": {"GROUP", false}, "sentinel observe": {"GROUP", false},
	"sentinel queue status": {"RESOURCE", true}, "sentinel queue follow": {"RESOURCE", true}, "sentinel queue reset": {"RESOURCE", true},
	"sentinel idempotency inspect": {"IDEMKEY", false}, "sentinel idempotency resolve": {"IDEMKEY", false},
}

// checkNamesFirst refuses a --namespace or --schema the library would
// refuse, and cmd's positional names (nameArgs).
func (a *app) checkNamesFirst(cmd *cobra.Command, args []string) error {
	if why := names.Namespace(a.namespace, sentinel.MaxNamespaceLen); why != "" {
		return usageErr("invalid --namespace %s: %s (a namespace is 1 to %d bytes of UTF-8 text without control characters)",
			argText(a.namespace), why, sentinel.MaxNamespaceLen)
	}
	if why := names.Schema(a.schema); why != "" {
		return usageErr("invalid --schema %s: %s", argText(a.schema), why)
	}
	if err := a.checkTextFlags(cmd); err != nil {
		return err
	}
	na, ok := nameArgs[cmd.CommandPath()]
	if !ok || len(args) == 0 {
		return nil
	}
	if !na.all {
		args = args[:1]
	}
	if na.word == "IDEMKEY" {
		scope, _ := cmd.Flags().GetString("scope")
		return checkIdemKey(scope, args[0])
	}
	return checkNames(na.word, args)
}

// textFlags are the text flags the commands store: the longest value the
// library takes, in bytes (0: no bound), UTF-8 without NUL. The library
// refuses a --label or --app-version that is not; a --reason it records
// in the history's metadata (jsonb) with each bad byte replaced by U+FFFD
// (see package sentinel's storableJSON), so it is refused here instead
// of being stored altered.
var textFlags = map[string]int{"label": sentinel.MaxLabelLen, "app-version": sentinel.MaxOwnerLen, "reason": 0}

// checkTextFlags refuses --operator, --label, --app-version, --reason and
// leases' and list's PREFIX where the library would refuse or alter them, and queue
// follow's negative --after.
func (a *app) checkTextFlags(cmd *cobra.Command) error {
	if a.operator != "" {
		// The owner recorded is OPERATOR/sentinel-PID (connect).
		if why := names.Name(a.owner(), sentinel.MaxOwnerLen); why != "" {
			return usageErr("invalid --operator %s: the owner recorded, OPERATOR/sentinel-PID, %s", argText(a.operator), why)
		}
	}
	for name, maxLen := range textFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		v := f.Value.String()
		why := names.Text(v)
		if maxLen > 0 && len(v) > maxLen {
			why = fmt.Sprintf("is %d bytes, the limit is %d", len(v), maxLen)
		}
		if why != "" {
			return usageErr("invalid --%s %s: %s", name, argText(v), why)
		}
	}
	if (cmd.CommandPath() == "sentinel leases" || cmd.CommandPath() == "sentinel list") && len(cmd.Flags().Args()) == 1 {
		p := cmd.Flags().Arg(0)
		if p == "" {
			// A script's "$KEY" with KEY unset would list every key.
			return usageErr("PREFIX is empty: give the start of the key, or leave PREFIX out")
		}
		why := names.Text(p)
		if len(p) > sentinel.MaxKeyLen {
			why = fmt.Sprintf("is %d bytes, the limit is %d", len(p), sentinel.MaxKeyLen)
		}
		if why != "" {
			return usageErr("invalid PREFIX %s: %s", argText(p), why)
		}
	}
	if cmd.CommandPath() == "sentinel queue follow" {
		if n, err := cmd.Flags().GetInt64("after"); err == nil && n < 0 {
			return usageErr("--after %d: give an event ID (0 replays the whole history)", n)
		}
	}
	return nil
}

// checkNames refuses the first of words (each a KEY, GROUP or RESOURCE,
// as what says) the library would refuse.
func checkNames(what string, words []string) error {
	for _, w := range words {
		if why := names.Name(w, sentinel.MaxKeyLen); why != "" {
			return usageErr("invalid %s %s: %s (a %s is 1 to %d bytes of UTF-8 text without NUL bytes)",
				what, argText(w), why, what, sentinel.MaxKeyLen)
		}
	}
	return nil
}

// checkIdemKey refuses an Idempotency-Key whose execution key (the key
// with its scope) the library would refuse.
func checkIdemKey(scope, key string) error {
	if key == "" {
		return usageErr("invalid KEY %s: must not be empty", argText(key))
	}
	execKey := idempotency.ExecutionKey(scope, key)
	if why := names.Name(execKey, sentinel.MaxKeyLen); why != "" {
		return usageErr("invalid KEY %s: its execution key (the key with its --scope) %s (a KEY is at most %d bytes of UTF-8 text with its scope)",
			argText(key), strings.TrimPrefix(why, "is "), sentinel.MaxKeyLen)
	}
	return nil
}

// checkCursor refuses a follow --after the library would refuse.
func checkCursor(cursor string) error {
	if cursor == "" {
		return nil
	}
	if _, _, _, why := names.Cursor(cursor, maxCursorText, sentinel.MaxFollowCursorRanges, sentinel.MaxFollowCursorIDs); why != "" {
		return usageErr("invalid --after %s: %s: give the cursor a follow printed when it ended (with --json, an event's \"cursor\"), or an event ID",
			argText(cursor), why)
	}
	return nil
}

// maxCursorText is the library's bound on a cursor's text (64 KiB).
const maxCursorText = 64 << 10

// checkEventTypes refuses a follow --type the library would refuse.
func checkEventTypes(types []string) error {
	for _, t := range types {
		if why := names.Name(t, 64); why != "" {
			return usageErr("invalid --type %s: %s", argText(t), why)
		}
	}
	return nil
}

// owner is the owner the commands record: OPERATOR/sentinel-PID.
func (a *app) owner() string {
	return fmt.Sprintf("%s/sentinel-%d", a.operator, os.Getpid())
}
