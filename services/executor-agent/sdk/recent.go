package sdk

// recentIDs remembers the last n accepted trigger ids (with the day of their log file), so a
// fire sent twice, e.g. after a scheduler failover, runs once. The oldest id is forgotten first.
type recentIDs struct {
	n    int
	ring []string
	next int
	days map[string]string
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{n: n, days: map[string]string{}}
}

func (r *recentIDs) add(id, day string) {
	if _, ok := r.days[id]; ok {
		return
	}
	if len(r.ring) < r.n {
		r.ring = append(r.ring, id)
	} else {
		delete(r.days, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % r.n
	}
	r.days[id] = day
}

func (r *recentIDs) get(id string) (string, bool) {
	p, ok := r.days[id]
	return p, ok
}
