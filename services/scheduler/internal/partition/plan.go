package partition

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"
)

// busy marks, in the owners plan reads, a partition that is neither free nor led by a live member
// as far as the plan is concerned: one this replica is still handing over, or a stale key of its
// own it is deleting. No replica id is a single NUL.
const busy = "\x00"

// PartitionOf returns the partition of job id among count partitions: id mod count, never
// negative. count must be positive.
func PartitionOf(id int64, count int) int {
	p := id % int64(count)
	if p < 0 {
		p += int64(count)
	}
	return int(p)
}

// plan decides which partitions me takes and gives up so that the live members converge on a fair
// share of len(owners) partitions. owners holds the leader of every partition as etcd has it
// ("" for a free one); members are the live replicas (me counts even when it is missing). A
// partition held by someone who is not a live member is not free: its key vanishes with its lease.
//
// With N live members and P partitions every member ends up leading floor(P/N) or ceil(P/N):
// a member takes free partitions up to ceil, or only up to floor while another member leads
// fewer than floor; it gives up down to ceil, or down to floor while another leads fewer than
// floor. Free partitions are taken in rendezvous order (those me wins among the live members
// first), so replicas that plan on the same view mostly pick different ones, and the ones given
// up are those me ranks worst, less those young (nil: none) says are still settling: they are
// kept for now, and none is given up in their place (settleTTLs).
func plan(me string, members []string, owners []string, young func(part int) bool) (acquire, release []int) {
	if len(owners) == 0 {
		return nil, nil
	}
	live := make(map[string]bool, len(members)+1)
	for _, id := range members {
		live[id] = true
	}
	live[me] = true
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	p, n := len(owners), len(live)
	floor, ceil := p/n, (p+n-1)/n

	led := make(map[string]int, n)
	var mine, free []int
	for part, o := range owners {
		switch {
		case o == "":
			free = append(free, part)
		case live[o]:
			led[o]++
			if o == me {
				mine = append(mine, part)
			}
		}
	}
	starving := false // another live member leads fewer than floor
	for _, id := range ids {
		if id != me && led[id] < floor {
			starving = true
		}
	}
	target := ceil
	if starving {
		target = floor
	}
	switch have := len(mine); {
	case have > target:
		sortByPreference(me, ids, mine)
		for _, part := range mine[target:] {
			if young == nil || !young(part) {
				release = append(release, part)
			}
		}
		slices.Sort(release)
	case have < target && len(free) > 0:
		sortByPreference(me, ids, free)
		acquire = slices.Clone(free[:min(target-have, len(free))])
		slices.Sort(acquire)
	}
	return acquire, release
}

// sortByPreference orders parts by how well me fits them: first those me wins by rendezvous hash
// among ids (fewest ids ranking above me), then by me's score, then by number.
func sortByPreference(me string, ids []string, parts []int) {
	type ranked struct {
		part, above int
		score       uint64
	}
	rs := make([]ranked, len(parts))
	for i, part := range parts {
		s := score(part, me)
		above := 0
		for _, id := range ids {
			if id != me && score(part, id) > s {
				above++
			}
		}
		rs[i] = ranked{part: part, above: above, score: s}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.above, b.above), cmp.Compare(b.score, a.score), cmp.Compare(a.part, b.part))
	})
	for i, r := range rs {
		parts[i] = r.part
	}
}

// score is the rendezvous hash of partition part for replica id: the same on every replica.
func score(part int, id string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(part))
	h.Write(b[:])
	h.Write([]byte(id))
	// FNV mixes its last bytes poorly; the splitmix64 finalizer spreads them over all bits.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
