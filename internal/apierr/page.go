package apierr

// MaxSkip is the most results a listing skips before its page (the "skip" of jump-to-page): a
// store walks every skipped row, so the bound keeps one request's cost bounded.
const MaxSkip = 1_000_000

// Skip records a problem with a listing's skip when it is negative or above MaxSkip.
func (fs *Fields) Skip(field string, v int32) {
	if v < 0 || v > MaxSkip {
		fs.Add(field, "want 0-%d, got %d", MaxSkip, v)
	}
}
