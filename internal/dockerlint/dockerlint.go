// Package dockerlint checks a Dockerfile without a Docker engine: it parses it with BuildKit's
// own parser (the one `docker build` uses), runs the build checks BuildKit applies while
// parsing, and adds the rules that keep jobmesh's images reproducible and unprivileged (pinned
// base images, exec-form commands, non-root runtime stages, lean apt installs). `make test`
// runs it on the repository's Dockerfile, where no engine is needed to catch a broken image.
package dockerlint

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// Finding is one problem, at a line of the Dockerfile.
type Finding struct {
	Line    int
	Rule    string
	Message string
}

func (f Finding) String() string { return fmt.Sprintf("line %d: %s: %s", f.Line, f.Rule, f.Message) }

// Result is what Lint found: the stages (build targets) by name, in order, and the findings.
type Result struct {
	Stages   []string
	Findings []Finding
}

// Lint parses the Dockerfile in r and checks it. An error means it does not parse at all.
func Lint(r io.Reader) (Result, error) {
	var res Result
	ast, err := parser.Parse(r)
	if err != nil {
		return res, fmt.Errorf("dockerfile: %w", err)
	}
	add := func(line int, rule, format string, args ...any) {
		res.Findings = append(res.Findings, Finding{Line: line, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	for _, w := range ast.Warnings {
		line := 0
		if w.Location != nil {
			line = w.Location.Start.Line
		}
		add(line, "parser", "%s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		add(firstLine(loc), rule, "%s", msg)
	}})
	stages, _, err := instructions.Parse(ast.AST, lint)
	if err != nil {
		return res, fmt.Errorf("dockerfile: %w", err)
	}
	for _, n := range ast.AST.Children {
		if kw, _, _ := strings.Cut(strings.TrimSpace(n.Original), " "); kw != strings.ToUpper(kw) {
			add(n.StartLine, "InstructionCasing", "%s: write instructions in upper case", kw)
		}
	}

	users := map[string]string{} // stage name → its effective USER ("" for the base image's)
	for _, st := range stages {
		line := firstLine(st.Location)
		if st.Name != "" {
			if slices.Contains(res.Stages, st.Name) {
				add(line, "DuplicateStageName", "stage %q is defined twice", st.Name)
			}
			res.Stages = append(res.Stages, st.Name)
		}
		user, fromStage := users[st.BaseName]
		if !fromStage {
			user = ""
			checkBaseImage(st.BaseName, line, add)
		}
		runtime := false
		for _, c := range st.Commands {
			cl := firstLine(c.Location())
			switch c := c.(type) {
			case *instructions.UserCommand:
				user = c.User
			case *instructions.WorkdirCommand:
				if !strings.HasPrefix(c.Path, "/") && !strings.HasPrefix(c.Path, "$") {
					add(cl, "WorkdirRelativePath", "WORKDIR %s: use an absolute path", c.Path)
				}
			case *instructions.CopyCommand:
				if c.From != "" && !slices.Contains(res.Stages, c.From) && !strings.ContainsAny(c.From, ":/") {
					add(cl, "CopyFromUnknownStage", "COPY --from=%s: no earlier stage has that name", c.From)
				}
			case *instructions.RunCommand:
				checkAptGet(strings.Join(c.CmdLine, " "), cl, add)
			case *instructions.EntrypointCommand:
				runtime = true
				if c.PrependShell {
					add(cl, "ExecForm", "ENTRYPOINT in shell form: write it as a JSON array, so signals reach the program")
				}
			case *instructions.CmdCommand:
				runtime = true
				if c.PrependShell {
					add(cl, "ExecForm", "CMD in shell form: write it as a JSON array, so signals reach the program")
				}
			case *instructions.HealthCheckCommand:
				if t := c.Health.Test; len(t) > 0 && t[0] == "CMD-SHELL" {
					add(cl, "ExecForm", "HEALTHCHECK CMD in shell form: write it as a JSON array (the service images have no shell)")
				}
			}
		}
		if runtime && (user == "" || user == "root" || user == "0" || strings.HasPrefix(user, "root:") || strings.HasPrefix(user, "0:")) {
			add(line, "RootUser", "stage %s runs as root: set a USER that is not root", stageName(st))
		}
		if st.Name != "" {
			users[st.Name] = user
		}
	}
	return res, nil
}

// checkBaseImage wants a base image pinned to a tag or digest other than latest.
func checkBaseImage(image string, line int, add func(int, string, string, ...any)) {
	if image == "scratch" || strings.Contains(image, "$") {
		return
	}
	if strings.Contains(image, "@sha256:") {
		return
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	switch {
	case !ok:
		add(line, "UnpinnedBaseImage", "FROM %s: pin a tag or digest", image)
	case tag == "latest":
		add(line, "UnpinnedBaseImage", "FROM %s: pin a tag other than latest", image)
	}
}

var aptInstall = regexp.MustCompile(`\bapt-get\s+(?:\S+\s+)*install\b`)

// checkAptGet wants apt-get install to be non-interactive and lean, and to leave no lists in the
// layer.
func checkAptGet(run string, line int, add func(int, string, string, ...any)) {
	for _, cmd := range regexp.MustCompile(`&&|;|\|\|`).Split(run, -1) {
		if !aptInstall.MatchString(cmd) {
			continue
		}
		f := strings.Fields(cmd)
		if !slices.Contains(f, "-y") && !slices.Contains(f, "--yes") && !slices.Contains(f, "-qy") {
			add(line, "AptGetYes", "apt-get install without -y waits for an answer no build gives")
		}
		if !slices.Contains(f, "--no-install-recommends") {
			add(line, "AptGetNoRecommends", "apt-get install without --no-install-recommends pulls in packages nothing needs")
		}
	}
	if aptInstall.MatchString(run) && !strings.Contains(run, "rm -rf /var/lib/apt/lists") {
		add(line, "AptGetLists", "apt-get install without rm -rf /var/lib/apt/lists/* in the same RUN keeps the package lists in the image")
	}
}

func firstLine(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
}

func stageName(st instructions.Stage) string {
	if st.Name != "" {
		return st.Name
	}
	return "FROM " + st.BaseName
}

// composeTarget finds the `target: NAME` of a compose file's build sections (block or flow style).
var composeTarget = regexp.MustCompile(`\btarget:\s*["']?([A-Za-z0-9_.-]+)`)

// ComposeTargets returns the build targets a compose file names, in order.
func ComposeTargets(compose string) []string {
	var out []string
	for _, m := range composeTarget.FindAllStringSubmatch(compose, -1) {
		out = append(out, m[1])
	}
	return out
}
