package main

import (
	"flag"
	"regexp"
	"strings"
	"testing"
)

// valueName is what a flag's help shows after the flag: one word naming what to give.
var valueName = regexp.MustCompile(`^[a-z][a-z0-9:-]*$`)

// TestFlagValueNames walks every command's flag set, as completion sees them, and checks that
// each flag that takes a value shows a proper name for it ("-data-dir dir", not "-data-dir
// string" or a word lifted from back-quoted help text), and that no back quote is left in any
// help text.
func TestFlagValueNames(t *testing.T) {
	t.Parallel()
	generic := map[string]bool{"string": true, "value": true, "int": true, "uint": true, "float": true}
	seen := 0
	for _, c := range completionTree() {
		paths := [][]string{{c.name}}
		if len(c.subs) > 0 {
			paths = nil
			for _, s := range c.subs {
				paths = append(paths, []string{c.name, s.name})
			}
		}
		for _, p := range paths {
			fs := flagsOf(p...)
			if fs == nil {
				continue
			}
			fs.VisitAll(func(f *flag.Flag) {
				seen++
				name, usage := flag.UnquoteUsage(f)
				where := "jobmesh " + strings.Join(p, " ") + " -" + f.Name
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
					if name != "" {
						t.Errorf("%s: a switch shows the value name %q", where, name)
					}
				} else if !valueName.MatchString(name) || generic[name] {
					t.Errorf("%s: value name %q; put the name of what to give in back quotes in its help (%q)", where, name, f.Usage)
				}
				if strings.Contains(usage, "`") {
					t.Errorf("%s: a back quote is left in its help: %q", where, usage)
				}
			})
		}
	}
	if seen < 100 {
		t.Errorf("walked %d flags; the commands declare well over 100", seen)
	}
}
