// Package doclinks checks the links of the repository's Markdown documents, so that what a user
// reads in README.md and docs/ points at something the repository has: every relative link and
// image names a file inside the repository (never a path beside it, such as ../shared), and every
// #anchor names a heading of the document it points at, by GitHub's heading slugs.
package doclinks

import (
	"fmt"
	"html"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Link is one link destination found in a document.
type Link struct {
	// Line is the 1-based line the link is on.
	Line int
	// Dest is the destination as written: a URL, a path, a path#anchor or #anchor.
	Dest string
}

// Problem is one link that does not resolve.
type Problem struct {
	// File is the document, relative to the repository root, with forward slashes.
	File string
	// Line is the link's line in File.
	Line int
	// Dest is the link's destination as written.
	Dest string
	// Why says what is wrong with it.
	Why string
}

// String formats the problem as file:line: destination: why.
func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Dest, p.Why)
}

// Documents lists the Markdown files under root (relative, forward slashes, sorted): README.md,
// docs/ and any other .md in the repository, leaving out hidden directories (.git, .data),
// node_modules, and the build outputs bin/ and dist/ (make release copies README.md there), which
// hold no documents of the project's own.
func Documents(root string) ([]string, error) {
	var docs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			if filepath.Dir(p) == filepath.Clean(root) && (name == "bin" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.EqualFold(path.Ext(name), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(docs)
	return docs, err
}

// Check checks every link of the documents docs (relative to root, as Documents lists them) and
// returns the ones that do not resolve. External links (http, https, mailto) are not followed.
func Check(root string, docs []string) ([]Problem, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{} // by absolute path of a Markdown target
	anchorsOf := func(abs string) (map[string]bool, error) {
		if a, ok := anchors[abs]; ok {
			return a, nil
		}
		src, err := os.ReadFile(abs)
		if err != nil {
			return nil, err
		}
		a := Anchors(string(src))
		anchors[abs] = a
		return a, nil
	}
	var problems []Problem
	for _, doc := range docs {
		abs := filepath.Join(root, filepath.FromSlash(doc))
		src, err := os.ReadFile(abs)
		if err != nil {
			return nil, err
		}
		for _, l := range Links(string(src)) {
			why, err := resolve(root, abs, l.Dest, anchorsOf)
			if err != nil {
				return nil, err
			}
			if why != "" {
				problems = append(problems, Problem{File: doc, Line: l.Line, Dest: l.Dest, Why: why})
			}
		}
	}
	return problems, nil
}

var (
	scheme   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	external = map[string]bool{"http": true, "https": true, "mailto": true}
)

// resolve says what is wrong with the link dest of the document doc (absolute), or "" when it
// resolves: to a file or directory inside root, and for a Markdown target with an anchor, to one
// of its headings.
func resolve(root, doc, dest string, anchorsOf func(abs string) (map[string]bool, error)) (string, error) {
	if m := scheme.FindString(dest); m != "" {
		if external[strings.ToLower(strings.TrimSuffix(m, ":"))] {
			return "", nil
		}
		return "a " + m + " link does not point into the repository", nil
	}
	if strings.HasPrefix(dest, "//") {
		return "", nil // scheme-relative: another host
	}
	p, frag, _ := strings.Cut(dest, "#")
	p, _, _ = strings.Cut(p, "?")
	if unescaped, err := url.PathUnescape(p); err == nil {
		p = unescaped
	}
	if unescaped, err := url.PathUnescape(frag); err == nil {
		frag = unescaped
	}
	target := doc
	switch {
	case p == "":
	case strings.HasPrefix(p, "/"): // GitHub resolves a leading slash at the repository's root
		target = filepath.Join(root, filepath.FromSlash(p))
	default:
		target = filepath.Join(filepath.Dir(doc), filepath.FromSlash(p))
	}
	rel, err := filepath.Rel(root, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "points outside the repository", nil
	}
	info, err := os.Stat(target)
	if err != nil {
		return "no such file in the repository: " + filepath.ToSlash(rel), nil
	}
	if frag == "" || info.IsDir() || !strings.EqualFold(filepath.Ext(target), ".md") {
		return "", nil
	}
	a, err := anchorsOf(target)
	if err != nil {
		return "", err
	}
	if !a[frag] {
		return "no heading with anchor #" + frag + " in " + filepath.ToSlash(rel), nil
	}
	return "", nil
}

var (
	fenceOpen  = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})")
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$`)
	atxClosing = regexp.MustCompile(`(?:^|[ \t]+)#+[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	notPara    = regexp.MustCompile(`^(?: {4,}|\t| {0,3}(?:[>|<]|(?:[-*+]|\d+[.)])(?:[ \t]|$)))`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
	htmlAttr   = regexp.MustCompile(`(?i)\b(href|src)\s*=\s*(?:"([^"]*)"|'([^']*)')`)
	htmlID     = regexp.MustCompile(`(?i)<[a-z][^>]*\b(?:id|name)\s*=\s*(?:"([^"]*)"|'([^']*)')`)
	htmlTag    = regexp.MustCompile(`<[^>]*>`)
	comment    = regexp.MustCompile(`<!--.*?-->`)
)

// lines calls fn for each line of src outside fenced code blocks, with its 1-based number.
func lines(src string, fn func(n int, line string)) {
	var fence string // the opening run of the fenced block we are in, if any
	for i, line := range strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n") {
		if fence != "" {
			t := strings.TrimSpace(line)
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			fence = m[1]
			continue
		}
		fn(i+1, line)
	}
}

// codeSpans splits a line into its text outside inline code spans (even indexes) and the
// contents of its code spans (odd indexes). A backtick run with no closing run of the same length
// is text.
func codeSpans(line string) []string {
	var parts []string
	text := 0
	for i := 0; i < len(line); {
		if line[i] == '\\' && i+1 < len(line) {
			i += 2
			continue
		}
		if line[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(line) && line[j] == '`' {
			j++
		}
		run := line[i:j]
		end := -1
		for k := j; k < len(line); {
			if line[k] != '`' {
				k++
				continue
			}
			m := k
			for m < len(line) && line[m] == '`' {
				m++
			}
			if m-k == len(run) {
				end = k
				break
			}
			k = m
		}
		if end < 0 {
			i = j
			continue
		}
		parts = append(parts, line[text:i], strings.TrimSpace(line[j:end]))
		i = end + len(run)
		text = i
	}
	return append(parts, line[text:])
}

// Links returns the link destinations of a Markdown document outside code: inline links and
// images ([text](dest), ![alt](dest)), reference definitions ([label]: dest) and the href and src
// attributes of inline HTML.
func Links(src string) []Link {
	var links []Link
	lines(src, func(n int, line string) {
		if m := refDef.FindStringSubmatch(line); m != nil {
			links = append(links, Link{n, strings.Trim(m[1], "<>")})
			return
		}
		for i, part := range codeSpans(line) {
			if i%2 == 1 {
				continue
			}
			part = comment.ReplaceAllString(part, "")
			for _, d := range inlineDests(part) {
				links = append(links, Link{n, d})
			}
			for _, m := range htmlAttr.FindAllStringSubmatch(part, -1) {
				links = append(links, Link{n, m[2] + m[3]})
			}
		}
	})
	return links
}

// inlineDests returns the destinations of the inline links and images in text: what follows
// each "](", up to its closing parenthesis, without a title.
func inlineDests(text string) []string {
	var dests []string
	for i := 0; i+1 < len(text); i++ {
		if text[i] != ']' || text[i+1] != '(' || (i > 0 && text[i-1] == '\\') {
			continue
		}
		rest := strings.TrimLeft(text[i+2:], " \t")
		if strings.HasPrefix(rest, "<") {
			if end := strings.IndexByte(rest, '>'); end > 0 {
				dests = append(dests, rest[1:end])
			}
			continue
		}
		depth, end := 0, len(rest)
	scan:
		for j, r := range rest {
			switch {
			case r == '(':
				depth++
			case r == ')' && depth == 0, r == ' ', r == '\t':
				end = j
				break scan
			case r == ')':
				depth--
			}
		}
		if d := rest[:end]; d != "" {
			dests = append(dests, d)
		}
	}
	return dests
}

// Anchors returns the anchors a Markdown document offers: the slug of every heading (a repeated
// slug gets -1, -2, … as GitHub numbers them) and the id and name attributes of its inline HTML.
func Anchors(src string) map[string]bool {
	anchors := map[string]bool{}
	counts := map[string]int{}
	add := func(heading string) {
		s := Slug(heading)
		if s == "" {
			return
		}
		unique := s
		for anchors[unique] {
			counts[s]++
			unique = fmt.Sprintf("%s-%d", s, counts[s])
		}
		anchors[unique] = true
	}
	prev, prevN := "", 0 // the previous line outside code, if it could be a setext heading's text
	lines(src, func(n int, line string) {
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			anchors[m[1]+m[2]] = true
		}
		switch {
		case atxHeading.MatchString(line):
			text := atxHeading.FindStringSubmatch(line)[2]
			add(atxClosing.ReplaceAllString(text, ""))
			prev = ""
			return
		case setextLine.MatchString(line) && prev != "" && prevN == n-1:
			add(prev)
			prev = ""
			return
		}
		prev, prevN = "", n
		if strings.TrimSpace(line) != "" && !notPara.MatchString(line) && !setextLine.MatchString(line) {
			prev = strings.TrimSpace(line)
		}
	})
	return anchors
}

var (
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])`)
	escaped    = regexp.MustCompile("\\\\([!-/:-@\\[-`{-~])")
)

// Slug returns the anchor GitHub gives a heading whose Markdown text is heading: the rendered
// text (code spans' contents, link and image text, no emphasis or HTML tags) lower-cased, with
// every character that is not a letter, a digit, a mark, '-' or '_' dropped and each space made
// a '-'.
func Slug(heading string) string {
	var text strings.Builder
	for i, part := range codeSpans(strings.TrimSpace(heading)) {
		if i%2 == 1 {
			text.WriteString(part)
			continue
		}
		part = inlineLink.ReplaceAllString(part, "$1")
		part = htmlTag.ReplaceAllString(part, "")
		part = stripEmphasisUnderscores(part)
		part = escaped.ReplaceAllString(part, "$1")
		text.WriteString(html.UnescapeString(part))
	}
	var slug strings.Builder
	for _, r := range strings.ToLower(text.String()) {
		switch {
		case r == ' ':
			slug.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			slug.WriteRune(r)
		}
	}
	return slug.String()
}

// stripEmphasisUnderscores drops the underscores that delimit emphasis (_word_, __word__): a
// run at the edge of a word. Underscores inside a word (snake_case) or standing alone between
// spaces are text and stay.
func stripEmphasisUnderscores(s string) string {
	rs := []rune(s)
	var out []rune
	for i := 0; i < len(rs); {
		if rs[i] != '_' {
			out = append(out, rs[i])
			i++
			continue
		}
		j := i
		for j < len(rs) && rs[j] == '_' {
			j++
		}
		before := i > 0 && isWordRune(rs[i-1])
		after := j < len(rs) && isWordRune(rs[j])
		alone := (i == 0 || unicode.IsSpace(rs[i-1])) && (j == len(rs) || unicode.IsSpace(rs[j]))
		if before && after || alone {
			out = append(out, rs[i:j]...)
		}
		i = j
	}
	return string(out)
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }
