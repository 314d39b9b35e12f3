package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// Revoker is what a Backend implements to take revocations of the
// overlay CA (docs/membership.md); the agent does.
type Revoker interface {
	// Revoke applies and floods a revocation (package ca's encoding).
	Revoke(rev []byte) error
}

// Revocation is the body of POST /v1/revocations: a revocation as written
// by `detour ca revoke` (base64).
type Revocation struct {
	Revocation string `json:"revocation"`
}

// trustChanges adds the endpoint of revocations, on the unix socket only,
// when the backend takes them.
func (s *Server) trustChanges(mux *http.ServeMux) {
	rv, ok := s.b.(Revoker)
	if !ok {
		return
	}
	mux.HandleFunc("POST /v1/revocations", func(w http.ResponseWriter, r *http.Request) {
		var rev Revocation
		if err := decode(r, &rev); err != nil {
			reply(w, nil, err)
			return
		}
		s.change(w, r, "revoke", func() (any, error) {
			b, err := decodeBase64(rev.Revocation)
			if err != nil {
				return nil, err
			}
			return map[string]string{"revoked": "applied and flooded"}, rv.Revoke(b)
		})
	})
}

// decodeBase64 decodes standard base64, white space around it ignored; a
// bad one is a bad request.
func decodeBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%w: revocation is not base64: %v", ErrBadRequest, err)
	}
	return b, nil
}
