package route

import (
	"crypto/md5"
	"encoding/binary"
	"hash/maphash"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"weak"
)

// addrSet is one interned address list. Jobs of the same group share it, and with it the hash
// ring, which is the expensive part: 100 MD5s and a sort per address.
type addrSet struct {
	addrs []string

	ringOnce sync.Once
	rg       *ring
}

// ring returns the set's consistent-hash ring, building it on first use.
func (s *addrSet) ring(vnodes int) *ring {
	s.ringOnce.Do(func() { s.rg = buildRing(s.addrs, vnodes) })
	return s.rg
}

// setCache interns address sets by content. It holds them weakly: a set lives while some job's
// state refers to it, so sets from past memberships vanish without an eviction policy.
type setCache struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]weak.Pointer[addrSet]
}

func (c *setCache) init(seed maphash.Seed) {
	c.seed = seed
	c.m = make(map[uint64]weak.Pointer[addrSet])
}

// intern returns the live set equal to addrs, or a new one holding a copy of addrs.
func (c *setCache) intern(addrs []string) *addrSet {
	fp := fingerprint(c.seed, addrs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.m[fp].Value(); s != nil && slices.Equal(s.addrs, addrs) {
		return s
	}
	s := &addrSet{addrs: slices.Clone(addrs)}
	wp := weak.Make(s)
	c.m[fp] = wp // a fingerprint collision just replaces the other set's entry
	runtime.AddCleanup(s, c.drop, setEntry{fp, wp})
	return s
}

type setEntry struct {
	fp uint64
	wp weak.Pointer[addrSet]
}

// drop removes a collected set's entry unless a newer set has taken its fingerprint.
func (c *setCache) drop(e setEntry) {
	c.mu.Lock()
	if c.m[e.fp] == e.wp {
		delete(c.m, e.fp)
	}
	c.mu.Unlock()
}

func fingerprint(seed maphash.Seed, addrs []string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	for _, a := range addrs {
		h.WriteString(a)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// ring is XXL-JOB's consistent-hash ring: vnodes points per address on a 2^32 circle.
// hashes is sorted; owners[i] indexes the set's addresses.
type ring struct {
	hashes []uint32
	owners []int32
}

// buildRing places "SHARD-"+addr+"-NODE-"+i for i < vnodes, as XXL-JOB does. XXL-JOB puts the
// points into a TreeMap in address order, so on a hash collision the later point wins; sorting
// by (hash, insertion order) and keeping the last of each hash reproduces that.
func buildRing(addrs []string, vnodes int) *ring {
	points := make([]uint64, 0, len(addrs)*vnodes) // hash<<32 | insertion order
	var buf []byte
	for ai, a := range addrs {
		for i := range vnodes {
			buf = append(buf[:0], "SHARD-"...)
			buf = append(buf, a...)
			buf = append(buf, "-NODE-"...)
			buf = strconv.AppendInt(buf, int64(i), 10)
			points = append(points, uint64(hash32(buf))<<32|uint64(ai*vnodes+i))
		}
	}
	slices.Sort(points)
	rg := &ring{hashes: make([]uint32, 0, len(points)), owners: make([]int32, 0, len(points))}
	for i, p := range points {
		if i+1 < len(points) && points[i+1]>>32 == p>>32 {
			continue // a later point with the same hash overwrites this one
		}
		rg.hashes = append(rg.hashes, uint32(p>>32))
		rg.owners = append(rg.owners, int32(uint32(p)/uint32(vnodes)))
	}
	return rg
}

// lookup returns the owner of the first point at or after key, wrapping to the first point.
func (rg *ring) lookup(key uint32) int {
	i, _ := slices.BinarySearch(rg.hashes, key)
	if i == len(rg.hashes) {
		i = 0
	}
	return int(rg.owners[i])
}

// hash32 is XXL-JOB's ring hash: the first four bytes of the MD5 digest, little-endian.
func hash32(b []byte) uint32 {
	sum := md5.Sum(b)
	return binary.LittleEndian.Uint32(sum[:4])
}

// jobKey is XXL-JOB's ring key for a job: the hash of its decimal id.
func jobKey(jobID int64) uint32 {
	var buf [20]byte
	return hash32(strconv.AppendInt(buf[:0], jobID, 10))
}
