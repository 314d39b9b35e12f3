package api

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

type revokingBackend struct {
	fakeBackend
	got [][]byte
}

func (r *revokingBackend) Revoke(b []byte) error {
	r.got = append(r.got, b)
	return nil
}

// TestRevocationsOnTheSocketOnly: the endpoint passes the decoded
// revocation to a backend that takes them, on the unix socket's handler
// only, and refuses a body that is not base64.
func TestRevocationsOnTheSocketOnly(t *testing.T) {
	b := &revokingBackend{}
	s := NewServer(b, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	post := func(body string, local bool) int {
		req := httptest.NewRequest("POST", "http://localhost/v1/revocations", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req = req.WithContext(withPeer(req.Context(), Peer{UID: 0, User: "root", PID: 1}))
		w := httptest.NewRecorder()
		if local {
			s.LocalHandler(Access{GID: -1}).ServeHTTP(w, req)
		} else {
			s.ReadHandler().ServeHTTP(w, req)
		}
		return w.Code
	}
	if code := post(`{"revocation":"AQID"}`, true); code != 200 || len(b.got) != 1 || string(b.got[0]) != "\x01\x02\x03" {
		t.Fatalf("revocation on the socket: %d, backend got %q", code, b.got)
	}
	if code := post(`{"revocation":"not base64!"}`, true); code != 400 {
		t.Errorf("bad base64: %d, want 400", code)
	}
	if code := post(`{"revocation":"AQID"}`, false); code == 200 || len(b.got) != 1 {
		t.Errorf("revocation on the read-only handler: %d", code)
	}
}
