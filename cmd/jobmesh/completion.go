package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jobmesh/jobmesh/internal/cli"
)

const completionUsage = `Usage: jobmesh completion bash|zsh|fish

Prints a script that completes jobmesh's commands, subcommands and flags in that shell:
  bash   source <(jobmesh completion bash)        (in ~/.bashrc; needs bash-completion's complete -o)
  zsh    source <(jobmesh completion zsh)         (in ~/.zshrc, after compinit)
  fish   jobmesh completion fish > ~/.config/fish/completions/jobmesh.fish
`

// runCompletion is `jobmesh completion bash|zsh|fish`.
func runCompletion(args []string, stdout, stderr io.Writer) error {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "help" }) {
		fmt.Fprint(stdout, completionUsage)
		return nil
	}
	if len(args) != 1 {
		fmt.Fprint(stderr, completionUsage)
		return usageError{errors.New("completion: name one shell: bash, zsh or fish")}
	}
	tree := completionTree()
	switch args[0] {
	case "bash":
		return writeBash(stdout, tree)
	case "zsh":
		return writeZsh(stdout, tree)
	case "fish":
		return writeFish(stdout, tree)
	}
	return usageError{fmt.Errorf("completion: unknown shell %q: want bash, zsh or fish", args[0])}
}

// compCommand is one command as completion sees it.
type compCommand struct {
	name  string // first word
	about string
	subs  []compCommand // second words; their flags are theirs
	flags []compFlag
}

type compFlag struct {
	name, about string
	takesValue  bool
}

// spelled is the flag as completion offers it: -o for a one-letter name, --name otherwise.
func (f compFlag) spelled() string {
	if len(f.name) == 1 {
		return "-" + f.name
	}
	return "--" + f.name
}

// completionTree lists every command with its subcommands and flags, from the same flag sets
// the commands parse.
func completionTree() []compCommand {
	about := commandSummaries()
	var out []compCommand
	for _, name := range commandNames {
		c := compCommand{name: name, about: about[name]}
		subs := subcommandNames[name]
		if slices.Contains(cli.Groups, name) {
			subs = nil
			for _, full := range cli.Commands() {
				if g, sub, ok := strings.Cut(full, " "); ok && g == name {
					subs = append(subs, sub)
				}
			}
		}
		for _, sub := range subs {
			c.subs = append(c.subs, compCommand{name: sub, flags: compFlags(flagsOf(name, sub))})
		}
		if len(subs) == 0 && name != "help" && name != "version" {
			c.flags = compFlags(flagsOf(name))
		}
		out = append(out, c)
	}
	return out
}

// commandSummaries are the one-line descriptions of the first words, from usage.
func commandSummaries() map[string]string {
	return map[string]string{
		"dev": "run every service in one process", "scheduler": "run one scheduler replica",
		"registry": "run the registry", "logsvc": "run logsvc", "gateway": "run the gateway and the auth service",
		"health": "check gRPC addresses and http(s) URLs", "tls": "make a private CA and certificates",
		"bench": "the load tool", "admin": "operator commands on the stores", "login": "log in to the gateway",
		"logout": "end the session", "jobs": "list, show, create, change and fire jobs", "runs": "list, follow and kill runs",
		"executors": "list live executors", "import": "copy an XXL-JOB database into jobmesh", "completion": "print a shell completion script",
		"version": "print the version", "help": "list the commands",
	}
}

func compFlags(fs *flag.FlagSet) []compFlag {
	if fs == nil {
		return nil
	}
	var out []compFlag
	fs.VisitAll(func(f *flag.Flag) {
		valueName, usage := flag.UnquoteUsage(f)
		out = append(out, compFlag{name: f.Name, about: shortAbout(usage), takesValue: valueName != ""})
	})
	return out
}

// shortAbout is the start of a flag's help, up to its first aside, on one line.
func shortAbout(usage string) string {
	s := strings.Join(strings.Fields(usage), " ")
	for _, sep := range []string{"; ", " (", ": "} {
		if i := strings.Index(s, sep); i > 0 {
			s = s[:i]
		}
	}
	if len(s) > 70 {
		s = s[:67] + "..."
	}
	return s
}

func words[T any](xs []T, name func(T) string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = name(x)
	}
	return strings.Join(out, " ")
}

func cmdName(c compCommand) string { return c.name }
func flagName(f compFlag) string   { return f.spelled() }

// writeBash: a completion function for `complete -F`. Words after a flag that takes a value,
// and positional arguments, fall back to bash's default (file names).
func writeBash(w io.Writer, tree []compCommand) error {
	var b strings.Builder
	b.WriteString(`# bash completion for jobmesh: source <(jobmesh completion bash)
_jobmesh() {
    local cur="${COMP_WORDS[COMP_CWORD]}" cmdpath="${COMP_WORDS[1]}"
    COMPREPLY=()
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "` + words(tree, cmdName) + `" -- "$cur"))
        return
    fi
    case "$cmdpath" in
`)
	for _, c := range tree {
		if len(c.subs) == 0 {
			continue
		}
		fmt.Fprintf(&b, `        %s)
            if [[ $COMP_CWORD -eq 2 ]]; then
                COMPREPLY=($(compgen -W "%s" -- "$cur"))
                return
            fi
            cmdpath="$cmdpath ${COMP_WORDS[2]}" ;;
`, c.name, words(c.subs, cmdName))
	}
	b.WriteString(`    esac
    [[ $cur == -* ]] || return
    local flags=""
    case "$cmdpath" in
`)
	forEachFlagSet(tree, func(path string, flags []compFlag) {
		fmt.Fprintf(&b, "        %q) flags=%q ;;\n", path, words(flags, flagName))
	})
	b.WriteString(`    esac
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
}
complete -o default -F _jobmesh jobmesh
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// forEachFlagSet calls fn with every command path that has flags ("dev", "jobs list", …).
func forEachFlagSet(tree []compCommand, fn func(path string, flags []compFlag)) {
	for _, c := range tree {
		if len(c.flags) > 0 {
			fn(c.name, c.flags)
		}
		for _, s := range c.subs {
			if len(s.flags) > 0 {
				fn(c.name+" "+s.name, s.flags)
			}
		}
	}
}

// zshQuote quotes s for zsh in single quotes.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeZsh: a function for compdef with descriptions of commands and flags.
func writeZsh(w io.Writer, tree []compCommand) error {
	var b strings.Builder
	b.WriteString(`#compdef jobmesh
# zsh completion for jobmesh: source <(jobmesh completion zsh), after compinit
_jobmesh() {
  local -a items
  local cmdpath=$words[2]
  if (( CURRENT == 2 )); then
    items=(
`)
	for _, c := range tree {
		fmt.Fprintf(&b, "      %s\n", zshQuote(c.name+":"+c.about))
	}
	b.WriteString(`    )
    _describe -t commands 'jobmesh command' items
    return
  fi
  case $cmdpath in
`)
	for _, c := range tree {
		if len(c.subs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "    %s)\n      if (( CURRENT == 3 )); then\n        items=(%s)\n        _describe -t commands %s items\n        return\n      fi\n      cmdpath=\"$cmdpath $words[3]\" ;;\n",
			c.name, words(c.subs, func(s compCommand) string { return zshQuote(s.name) }), zshQuote(c.name+" command"))
	}
	b.WriteString(`  esac
  if [[ $PREFIX != -* ]]; then
    _files
    return
  fi
  case $cmdpath in
`)
	forEachFlagSet(tree, func(path string, flags []compFlag) {
		fmt.Fprintf(&b, "    %s) items=(%s) ;;\n", zshQuote(path),
			words(flags, func(f compFlag) string { return zshQuote(strings.ReplaceAll(f.spelled(), ":", `\:`) + ":" + f.about) }))
	})
	b.WriteString(`    *) items=() ;;
  esac
  _describe -t flags 'flag' items
}
compdef _jobmesh jobmesh
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote quotes s for fish in single quotes.
func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

// writeFish: complete rules keyed on the words typed so far.
func writeFish(w io.Writer, tree []compCommand) error {
	var b strings.Builder
	b.WriteString(`# fish completion for jobmesh: jobmesh completion fish > ~/.config/fish/completions/jobmesh.fish
# __jobmesh_at WORDS...: the words before the cursor (after jobmesh) are exactly WORDS.
function __jobmesh_at
    set -l words (commandline -opc)
    set -e words[1]
    test "$words" = "$argv"
end
# __jobmesh_in "COMMAND": the command line starts with COMMAND (one or two words).
function __jobmesh_in
    set -l words (commandline -opc)
    set -e words[1]
    set -l want (string split ' ' -- $argv[1])
    test (count $words) -ge (count $want); or return 1
    for i in (seq (count $want))
        test "$words[$i]" = "$want[$i]"; or return 1
    end
end
`)
	for _, c := range tree {
		fmt.Fprintf(&b, "complete -c jobmesh -f -n __jobmesh_at -a %s -d %s\n", c.name, fishQuote(c.about))
		for _, s := range c.subs {
			fmt.Fprintf(&b, "complete -c jobmesh -f -n '__jobmesh_at %s' -a %s\n", c.name, s.name)
		}
	}
	forEachFlagSet(tree, func(path string, flags []compFlag) {
		for _, f := range flags {
			opt := "-l " + f.name
			if len(f.name) == 1 {
				opt = "-o " + f.name
			}
			if f.takesValue {
				opt += " -r"
			}
			fmt.Fprintf(&b, "complete -c jobmesh -n '__jobmesh_in \"%s\"' %s -d %s\n", path, opt, fishQuote(f.about))
		}
	})
	_, err := io.WriteString(w, b.String())
	return err
}
