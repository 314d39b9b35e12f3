package router

import "slices"

// WithPools returns a new table like t holding pools instead of t's
// pools: pools may add pools to t's, change them or drop them. Like
// Replace, the new table shares t's client marks and, for every pool that
// stays, its counters and the *Server of every server that stays. A pool
// that stays should keep its index (the agent appends new pools), since
// flow slots name pools by index.
func (t *Table) WithPools(pools []PoolSpec) (*Table, error) {
	spec := cloneSpec(t.spec)
	spec.Pools = slices.Clone(pools)
	for i := range spec.Pools {
		spec.Pools[i] = clonePool(spec.Pools[i])
	}
	return build(spec, t)
}
