package auth

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"
	"unicode"

	"github.com/jobmesh/jobmesh/internal/apierr"
)

// Password policy: 8 to 128 characters that do not count the user name (of 3 or more), not one of the most
// common passwords, and not the user name dressed up (reversed, with digits or symbols around it).

const (
	minPassword = 8
	maxPassword = 128
)

//go:embed common-passwords.txt
var commonPasswordsTxt string

// commonPasswords is the embedded list, lower case.
var commonPasswords = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(commonPasswordsTxt, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			m[strings.ToLower(l)] = true
		}
	}
	return m
})

// checkPassword returns an InvalidArgument naming field when p may not be user's password.
func checkPassword(field, user, p string) error {
	if why := passwordProblem(user, p); why != "" {
		return apierr.Field(field, "%s", why)
	}
	return nil
}

// passwordProblem says why p may not be user's password, or "".
func passwordProblem(user, p string) string {
	n := len([]rune(p))
	if n < minPassword || n > maxPassword {
		return fmt.Sprintf("want %d-%d characters, got %d", minPassword, maxPassword, n)
	}
	lp := strings.ToLower(p)
	if isCommon(lp) {
		return "is one of the most common passwords; choose another"
	}
	rest := lp
	if u := strings.ToLower(user); len([]rune(u)) >= 3 {
		rest = strings.ReplaceAll(rest, u, "")
		rest = strings.ReplaceAll(rest, reverse(u), "")
	}
	if rest != lp {
		core := strings.TrimFunc(rest, func(r rune) bool { return !unicode.IsLetter(r) })
		if len([]rune(rest)) < minPassword || core == "" || isCommon(core) || isCommon(rest) {
			return "is derived from the user name; choose another"
		}
	}
	return ""
}

// isCommon reports whether lp (lower case) is a common password, also once digits and symbols
// around it are dropped ("Password123!" is "password").
func isCommon(lp string) bool {
	common := commonPasswords()
	if common[lp] {
		return true
	}
	core := strings.TrimFunc(lp, func(r rune) bool { return !unicode.IsLetter(r) })
	return core != "" && common[core]
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}
