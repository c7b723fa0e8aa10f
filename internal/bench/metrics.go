package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// histogram is a Prometheus histogram's cumulative state, summed over its label sets.
type histogram struct {
	buckets map[float64]float64 // upper bound → cumulative count
	sum     float64
	count   float64
}

// scrapeHistogram reads the histogram name from a Prometheus text endpoint.
func scrapeHistogram(ctx context.Context, url, name string) (histogram, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return histogram{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return histogram{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return histogram{}, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseHistogram(resp.Body, name)
}

// parseHistogram picks name's _bucket, _sum and _count series out of the text format.
func parseHistogram(r io.Reader, name string) (histogram, error) {
	h := histogram{buckets: map[float64]float64{}}
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"_") {
			continue
		}
		series, value, ok := cutValue(line)
		if !ok {
			continue
		}
		metric, labels, _ := strings.Cut(series, "{")
		switch metric {
		case name + "_bucket":
			le, ok := label(labels, "le")
			if !ok {
				continue
			}
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil {
				continue
			}
			h.buckets[bound] += value
			found = true
		case name + "_sum":
			h.sum += value
		case name + "_count":
			h.count += value
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		return h, err
	}
	if !found {
		return h, fmt.Errorf("no histogram %s", name)
	}
	return h, nil
}

// cutValue splits "series value [timestamp]".
func cutValue(line string) (series string, value float64, ok bool) {
	end := strings.LastIndexByte(line, '}')
	rest := line
	if end >= 0 {
		series, rest = line[:end+1], line[end+1:]
	}
	f := strings.Fields(rest)
	if end < 0 {
		if len(f) < 2 {
			return "", 0, false
		}
		series, f = f[0], f[1:]
	}
	if len(f) == 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return series, v, err == nil
}

// label returns a label's value from `a="x",le="0.5"}`.
func label(labels, key string) (string, bool) {
	for part := range strings.SplitSeq(strings.TrimSuffix(labels, "}"), ",") {
		k, v, ok := strings.Cut(part, "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.Trim(strings.TrimSpace(v), `"`), true
		}
	}
	return "", false
}

// since summarizes the observations between an earlier scrape and this one; seconds are turned
// into milliseconds.
func (h histogram) since(before histogram, metric string) *Histogram {
	count := h.count - before.count
	out := &Histogram{Metric: metric, Count: count}
	if count <= 0 {
		return out
	}
	out.MeanMs = (h.sum - before.sum) / count * 1000
	bounds := make([]float64, 0, len(h.buckets))
	for b := range h.buckets {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	at := func(q float64) float64 {
		for _, b := range bounds {
			if h.buckets[b]-before.buckets[b] >= q*count {
				return b * 1000
			}
		}
		return math.Inf(1)
	}
	out.P50Ms, out.P99Ms = at(0.5), at(0.99)
	return out
}
