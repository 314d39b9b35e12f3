package router

// Health is the verdict on one server from a series of checks: it goes
// down after DownAfter checks in a row fail and comes back up after
// UpAfter checks in a row succeed, so a server at the edge of failing
// does not flap. The zero Health is up.
type Health struct {
	down          bool
	misses, goods int
}

// Thresholds of Health.
const (
	DownAfter = 2
	UpAfter   = 5
)

// Observe records one check and reports whether the verdict changed.
func (h *Health) Observe(ok bool) (changed bool) {
	if ok {
		h.misses = 0
		if !h.down {
			return false
		}
		h.goods++
		if h.goods >= UpAfter {
			h.down, h.goods = false, 0
			return true
		}
		return false
	}
	h.goods = 0
	if h.down {
		return false
	}
	h.misses++
	if h.misses >= DownAfter {
		h.down, h.misses = true, 0
		return true
	}
	return false
}

// ForceDown marks the server down at once (its site left the overlay, or
// passive detection saw no reply in time).
func (h *Health) ForceDown() (changed bool) {
	changed = !h.down
	h.down, h.misses, h.goods = true, 0, 0
	return changed
}

// Down reports the verdict.
func (h *Health) Down() bool { return h.down }
