package sdk

// recentIDs remembers the last n accepted trigger ids (with their log paths), so a fire sent
// twice, e.g. after a scheduler failover, runs once. The oldest id is forgotten first.
type recentIDs struct {
	n     int
	ring  []string
	next  int
	paths map[string]string
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{n: n, paths: map[string]string{}}
}

func (r *recentIDs) add(id, path string) {
	if _, ok := r.paths[id]; ok {
		return
	}
	if len(r.ring) < r.n {
		r.ring = append(r.ring, id)
	} else {
		delete(r.paths, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % r.n
	}
	r.paths[id] = path
}

func (r *recentIDs) get(id string) (string, bool) {
	p, ok := r.paths[id]
	return p, ok
}
