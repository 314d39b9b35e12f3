package topo

import (
	"testing"
	"time"
)

// Every generator gives a full matrix of positive delays, repeats with
// its seed, and has triangle-inequality violations to route around.
func TestGenerators(t *testing.T) {
	for _, kind := range Kinds {
		for _, n := range []int{10, 54, 100} {
			a, err := Generate(kind, n, 1)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Generate(kind, n, 1)
			if len(a.Sites) != n || len(a.Delay) != n {
				t.Fatalf("%s: %d sites, %d rows; want %d", a.Name, len(a.Sites), len(a.Delay), n)
			}
			names := map[string]bool{}
			for i := range n {
				if names[a.Sites[i]] {
					t.Fatalf("%s: duplicate site name %s", a.Name, a.Sites[i])
				}
				names[a.Sites[i]] = true
				for j := range n {
					if a.Delay[i][j] != b.Delay[i][j] {
						t.Fatalf("%s: the same seed gave two matrices", a.Name)
					}
					if i != j && (a.Delay[i][j] <= 0 || a.Delay[i][j] > time.Second) {
						t.Fatalf("%s: delay %s→%s is %v", a.Name, a.Sites[i], a.Sites[j], a.Delay[i][j])
					}
				}
			}
			any, five := a.TIVs()
			if any == 0 || five == 0 {
				t.Errorf("%s: %d pairs with a faster detour, %d by 5 %%; want some", a.Name, any, five)
			}
			t.Logf("%s: %d of %d ordered pairs have a faster one-hop detour, %d by at least 5 %%", a.Name, any, n*(n-1), five)
		}
	}
	if _, err := Generate("mesh", 10, 1); err == nil {
		t.Error("an unknown kind was accepted")
	}
}

// Up to the number of regions, a measured matrix gives the regions as
// measured: azure with 54 sites is the azure-54 scenario (RTT/2).
func TestAzureAsMeasured(t *testing.T) {
	a, err := Generate("azure", 54, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Australia Central → Australia Central 2 is 5 ms round trip.
	if a.Sites[0] != "australia-central" || a.Sites[1] != "australia-central-2" || a.Delay[0][1] != 2500*time.Microsecond {
		t.Errorf("first link %s→%s %v; want australia-central→australia-central-2 2.5 ms", a.Sites[0], a.Sites[1], a.Delay[0][1])
	}
}
