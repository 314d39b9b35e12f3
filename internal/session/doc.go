// Package session is detour's secure channel between sites: Noise IK
// handshakes between site keys, end-to-end sealing of frames, hop-by-hop
// authentication of relayed packets, and sealing of control messages.
// (Integration notes for the data path and the control plane below.)
package session
