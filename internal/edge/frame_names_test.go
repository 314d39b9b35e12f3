package edge

import "github.com/detour-overlay/detour/internal/frame"

// The names the tests of this package use for values package frame
// defines.
const (
	etherTypeIPv4 = frame.EtherTypeIPv4
	etherTypeIPv6 = frame.EtherTypeIPv6
	etherTypeVLAN = frame.EtherTypeVLAN
	protoTCP      = frame.ProtoTCP
	protoICMP     = frame.ProtoICMP
	protoICMPv6   = frame.ProtoICMPv6
	tcpFlagSYN    = frame.TCPFlagSYN
	ipv4FlagDF    = frame.IPv4FlagDF
	ipv4FlagMF    = frame.IPv4FlagMF
	ipv6HopByHop  = frame.IPv6HopByHop
	ipv6DestOpts  = frame.IPv6DestOpts
	tcpOptNOP     = frame.TCPOptNOP
	tcpOptMSS     = frame.TCPOptMSS
)
