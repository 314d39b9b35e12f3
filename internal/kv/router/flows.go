package router

// Flow slots let a local server's reply find its client (see the package
// comment): a request routed to a server at this site leaves with the
// source VIP:FlowPortBase+slot, and the server's reply to that port is
// sent on to the slot's client.

// Bounds of the flow table.
const (
	// FlowSlots is the number of flow slots per Worker.
	FlowSlots = 4096
	// FlowPortBase is the virtual address's port of slot 0.
	FlowPortBase = 40000
	// FlowIdle frees a slot this long after its last request (ns).
	FlowIdle = int64(30e9)
	// flowProbe is how many slots a client's hash may take.
	flowProbe = 8
)

// HealthPort is the virtual address's port health checks are sent from;
// replies to it are recorded, not forwarded.
const HealthPort = 39999

// flow is one slot.
type flow struct {
	ip   uint32
	port uint16
	pool uint16 // index of the pool in the table, +1 (0: free)
	mac  [6]byte
	last int64
}

// flows is a fixed table of slots, open addressing by the client's hash.
type flows struct {
	slots [FlowSlots]flow
}

// slotIndex hashes a client.
func slotIndex(ip uint32, port uint16, pool int) int {
	h := (uint64(ip)<<24 | uint64(port)<<8 | uint64(pool&0xff)) * 0x9e3779b97f4a7c15
	return int(h >> 52 & (FlowSlots - 1))
}

// take returns the slot of a client, refreshed, or a new one; -1 when the
// slots its hash may use are all held by other active clients.
func (f *flows) take(ip uint32, port uint16, mac []byte, pool int, now int64) int {
	start := slotIndex(ip, port, pool)
	free := -1
	for i := 0; i < flowProbe; i++ {
		j := (start + i) & (FlowSlots - 1)
		s := &f.slots[j]
		if s.pool == uint16(pool+1) && s.ip == ip && s.port == port {
			copy(s.mac[:], mac)
			s.last = now
			return j
		}
		if free < 0 && (s.pool == 0 || now-s.last > FlowIdle) {
			free = j
		}
	}
	if free < 0 {
		return -1
	}
	s := &f.slots[free]
	s.ip, s.port, s.pool, s.last = ip, port, uint16(pool+1), now
	copy(s.mac[:], mac)
	return free
}

// get returns the live slot for a reply to port of pool.
func (f *flows) get(port uint16, pool int, now int64) *flow {
	if port < FlowPortBase || port >= FlowPortBase+FlowSlots {
		return nil
	}
	s := &f.slots[port-FlowPortBase]
	if s.pool != uint16(pool+1) || now-s.last > FlowIdle {
		return nil
	}
	return s
}
