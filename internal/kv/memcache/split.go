package memcache

import "errors"

// Errors of the splitter.
var (
	// ErrShortBuffer means dst cannot hold the split requests.
	ErrShortBuffer = errors.New("memcache: split buffer too small")
	// ErrNotSplittable is a request Splitter does not cut: SplitGet takes
	// ASCII get, gets, gat and gats; SplitPipeline refuses a multi-key get
	// whose keys live on several servers inside a pipeline.
	ErrNotSplittable = errors.New("memcache: request cannot be split")
)

// Part is one server's share of a split request or pipeline.
type Part struct {
	// Server is the index the owner function gave, or -1 for a pipeline
	// of requests without keys.
	Server int
	// Buf is the request (or requests) to send, a sub-slice of the dst
	// given to the splitter.
	Buf []byte
	// Keys is the number of keys in Buf.
	Keys int
}

// OwnerFunc returns the index of the server holding key.
type OwnerFunc func(key []byte) int

// Splitter cuts multi-key gets and pipelines into one request per server.
// Its scratch space grows to the largest request seen and is reused, so
// after the first calls it allocates nothing. It is not safe for
// concurrent use; each data-path worker keeps its own.
type Splitter struct {
	owners []int32
	spans  [][2]int32
	parts  []Part
	keyBuf [MaxKeyLen]byte
}

// SplitGet cuts an ASCII get, gets, gat or gats into one request per
// server owning some of its keys, each written into dst as the same
// command (with gat's expiration time) followed by that server's keys in
// request order and "\r\n". Parts come in the order of each server's
// first key. memcached answers each request on its own, VALUE lines for
// the keys it holds and END; over UDP a client receives one reply per
// part under the same request id. The returned slice is valid until the
// next call.
func (s *Splitter) SplitGet(r *Request, owner OwnerFunc, dst []byte) ([]Part, error) {
	if r.Protocol != ASCII || r.keys == nil {
		return nil, ErrNotSplittable
	}
	prefix := r.Line[:r.keysOff]
	s.owners, s.spans = s.owners[:0], s.spans[:0]
	keys := r.keys
	for i := 0; i < len(keys); {
		for i < len(keys) && keys[i] == ' ' {
			i++
		}
		if i == len(keys) {
			break
		}
		j := i
		for j < len(keys) && keys[j] != ' ' {
			j++
		}
		s.spans = append(s.spans, [2]int32{int32(i), int32(j)})
		s.owners = append(s.owners, int32(owner(keys[i:j])))
		i = j
	}
	s.parts = s.parts[:0]
	w := 0
	for i, o := range s.owners {
		if s.seen(o) {
			continue
		}
		begin := w
		if w+len(prefix) > len(dst) {
			return nil, ErrShortBuffer
		}
		w += copy(dst[w:], prefix)
		n := 0
		for j := i; j < len(s.owners); j++ {
			if s.owners[j] != o {
				continue
			}
			k := keys[s.spans[j][0]:s.spans[j][1]]
			if w+len(k)+2 > len(dst) {
				return nil, ErrShortBuffer
			}
			if n > 0 {
				dst[w] = ' '
				w++
			}
			w += copy(dst[w:], k)
			n++
		}
		w += copy(dst[w:], "\r\n")
		s.parts = append(s.parts, Part{Server: int(o), Buf: dst[begin:w], Keys: n})
	}
	return s.parts, nil
}

// seen reports whether a part for server o exists.
func (s *Splitter) seen(o int32) bool {
	for _, p := range s.parts {
		if p.Server == int(o) {
			return true
		}
	}
	return false
}

// SplitPipeline cuts a buffer of complete requests (a datagram carrying
// "mg a v\r\nmg b v\r\nmn\r\n", or binary getkq, getkq, noop) into one
// buffer per server: each keyed request goes whole to its key's owner, in
// order, and each request without a key (mn, noop, version) goes to every
// server, so each server's share ends the way the client's pipeline
// does. A meta key given in base64 is decoded before it is hashed. The
// first malformed request's error is returned as Parse gives it.
func (s *Splitter) SplitPipeline(buf []byte, owner OwnerFunc, dst []byte) ([]Part, error) {
	s.owners, s.spans, s.parts = s.owners[:0], s.spans[:0], s.parts[:0]
	var r Request
	for off := 0; off < len(buf); off += r.Len {
		if err := Parse(buf[off:], &r); err != nil {
			return nil, err
		}
		o, err := s.requestOwner(&r, owner)
		if err != nil {
			return nil, err
		}
		s.spans = append(s.spans, [2]int32{int32(off), int32(off + r.Len)})
		s.owners = append(s.owners, o)
		if o >= 0 && !s.seen(o) {
			s.parts = append(s.parts, Part{Server: int(o)})
		}
	}
	if len(s.parts) == 0 {
		s.parts = append(s.parts, Part{Server: -1})
	}
	w := 0
	for p := range s.parts {
		begin := w
		for i, o := range s.owners {
			if o >= 0 && int(o) != s.parts[p].Server {
				continue
			}
			req := buf[s.spans[i][0]:s.spans[i][1]]
			if w+len(req) > len(dst) {
				return nil, ErrShortBuffer
			}
			w += copy(dst[w:], req)
			if o >= 0 {
				s.parts[p].Keys++
			}
		}
		s.parts[p].Buf = dst[begin:w]
	}
	return s.parts, nil
}

// requestOwner returns the server of a request in a pipeline, -1 when it
// has no key; a multi-key get must have all its keys on one server.
func (s *Splitter) requestOwner(r *Request, owner OwnerFunc) (int32, error) {
	o, err := s.Owner(r, owner)
	if err != nil || r.NumKeys < 2 {
		return int32(o), err
	}
	for k, rest := nextToken(r.keys); k != nil; k, rest = nextToken(rest) {
		if owner(k) != o {
			return 0, ErrNotSplittable
		}
	}
	return int32(o), nil
}

// Owner returns the server of a request: the owner of its (first) key,
// decoded first when it is a base64 meta key, or -1 when it has no key.
// A multi-key get may have keys on several servers; SplitGet cuts it.
func (s *Splitter) Owner(r *Request, owner OwnerFunc) (int, error) {
	if r.NumKeys == 0 {
		return -1, nil
	}
	k := r.Key()
	if r.Base64Key {
		var err error
		if k, err = DecodeKey(s.keyBuf[:], k); err != nil {
			return 0, err
		}
	}
	return owner(k), nil
}
