// Package seal lets one jobmesh service vouch for a value to another without a lookup: an
// HMAC-SHA256 over the value's parts under a key derived from the secret the services share (the
// internal token) and a purpose, so a seal made for one use is worthless for any other. The
// scheduler seals each fire's delivery token (its trigger id) and logsvc checks it; the
// registry seals the registrations it writes to etcd and its live view checks them.
package seal

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"sync"
)

// Purposes of the keys jobmesh derives.
const (
	// Delivery seals a fire's trigger id: the scheduler hands it to the executor the fire is
	// dispatched to, and logsvc stores that fire's results and lines only with it.
	Delivery = "jobmesh delivery v1"
	// Registration seals an executor's registration as the registry writes it to etcd.
	Registration = "jobmesh registration v1"
	// Credential fingerprints the access token an executor registered with, so the scheduler
	// can tell whether it is its group's token now without the token being in the registration.
	Credential = "jobmesh credential v1"
)

// Key seals and checks values for one purpose. The zero Key is not usable; a nil *Key seals
// nothing and accepts nothing. Safe for concurrent use.
type Key struct {
	pool sync.Pool // of hash.Hash, keyed
}

// New derives the key for purpose from secret (the services' internal token).
func New(secret, purpose string) *Key {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(purpose))
	derived := m.Sum(nil)
	k := &Key{}
	k.pool.New = func() any { return hmac.New(sha256.New, derived) }
	return k
}

// Sum seals parts (each is length-prefixed, so no two lists of parts share a seal) and returns
// the seal in unpadded URL-safe base64: 43 characters.
func (k *Key) Sum(parts ...string) string {
	var buf [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(k.sum(buf[:0], parts))
}

// Valid reports whether s is the seal of parts, in constant time.
func (k *Key) Valid(s string, parts ...string) bool {
	if k == nil || len(s) != base64.RawURLEncoding.EncodedLen(sha256.Size) {
		return false
	}
	var got, want [sha256.Size]byte
	if _, err := base64.RawURLEncoding.Decode(got[:], []byte(s)); err != nil {
		return false
	}
	return hmac.Equal(got[:], k.sum(want[:0], parts))
}

func (k *Key) sum(dst []byte, parts []string) []byte {
	m := k.pool.Get().(hash.Hash)
	m.Reset()
	var n [4]byte
	for _, p := range parts {
		l := len(p)
		n[0], n[1], n[2], n[3] = byte(l>>24), byte(l>>16), byte(l>>8), byte(l)
		m.Write(n[:])
		m.Write([]byte(p))
	}
	dst = m.Sum(dst)
	k.pool.Put(m)
	return dst
}
