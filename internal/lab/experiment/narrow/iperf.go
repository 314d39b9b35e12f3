package narrow

import (
	"encoding/json"
	"errors"
	"fmt"
)

// iperfResult is the part of iperf3's JSON report (-J) the experiment
// reads: what the receiver got and what the sender retransmitted.
type iperfResult struct {
	End struct {
		SumSent struct {
			Bytes         float64 `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
			Retransmits   int     `json:"retransmits"`
		} `json:"sum_sent"`
		SumReceived struct {
			Seconds       float64 `json:"seconds"`
			Bytes         float64 `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

// parseIperf reads an iperf3 client's JSON report.
func parseIperf(b []byte) (iperfResult, error) {
	var r iperfResult
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("iperf3 report: %w", err)
	}
	if r.Error != "" {
		return r, errors.New("iperf3: " + r.Error)
	}
	if r.End.SumReceived.Seconds <= 0 {
		return r, errors.New("iperf3 report: no transfer measured")
	}
	return r, nil
}
