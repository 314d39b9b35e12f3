// Package offload lets the data path use a TAP device's segmentation
// offloads: with IFF_VNET_HDR and TSO enabled (device.TAPOptions{VnetHdr:
// true}), the kernel hands over TCP super-frames of up to 64 KB, each
// behind a 10-byte virtio_net_hdr, and accepts them the same way. Moving
// one super-frame instead of forty 1500-byte frames divides the per-frame
// costs (system calls, lookups, header building) on both gateways.
//
// The same holds for UDP where the kernel (Linux 6.2 and later) accepts
// UDP segmentation offload (USO) on the device. A host sending with
// UDP_SEGMENT then hands over UDP super-frames (GSO type UDP_L4): up to
// 64 datagrams (128 on recent kernels such as 6.18) of one size, the last
// possibly shorter, which Split cuts apart. A Coalescer on which EnableUDP
// was called merges consecutive datagrams of one flow into such
// super-frames of up to 64 datagrams, which the device takes in one
// write. A device without USO never hands them over, and its Coalescer
// must not build them.
//
// Everything here is a pure function or a small state machine on the
// caller's buffers: nothing allocates after setup, nothing does I/O.
// Headers are parsed and built, and checksums computed, with package
// frame.
//
// # How the data path calls it
//
// Egress (TAP to underlay), once per frame the device gives:
//
//	// bufs[i] holds HdrLen + up to 65535+18 bytes from TAP.ReadBatch.
//	n, err := offload.Split(bufs[i][:sizes[i]], frames, frameSizes)
//	// frames: at least 128 caller-owned buffers of Headroom+MTU+18+
//	// Tailroom, each sliced at Headroom so the overlay header can go in
//	// front (a UDP super-frame carries up to 128 datagrams on recent
//	// kernels, 64 on older ones).
//	// On error count a drop and go on; else forward frames[0:n] exactly
//	// as frames read without offloads are forwarded today (FDB, route,
//	// seal, one WriteBatch for the whole lot: with transport's UDP GSO
//	// the equal-sized segments of one super-frame leave in one sendmsg).
//
// Split also completes the partial checksums of frames without GSO (the
// kernel leaves them partial once CSUM offload is on), so every frame that
// crosses the tunnel is complete and needs nothing from the far side.
//
// Ingress (underlay to TAP), per batch of datagrams from ReadBatch, in
// order, for each frame to deliver to a device (after opening and
// checks):
//
//	if !c.Add(frame) {               // c: one offload.Coalescer per device,
//		if c.Pending() {             // made once with NewCoalescer(make(
//			dev.Write(c.Flush())     // []byte, HdrLen+65535+18)), then
//		}                            // c.EnableUDP() if the device has USO
//		if !c.Add(frame) {
//			// Not TCP or UDP (or not joinable): write it alone behind a
//			// plain header, using HdrLen bytes of headroom before the frame:
//			hdr := pkt[off-offload.HdrLen : off]
//			offload.PutPlain(hdr)
//			dev.Write(pkt[off-offload.HdrLen : off+len(frame)])
//		}
//	}
//	// ... and after the last datagram of the batch:
//	if c.Pending() {
//		dev.Write(c.Flush())
//	}
//
// Flush before switching device (one Coalescer per device, or flush when
// the network changes), and never hold a super-frame across a blocking
// read: the batch end is the flush point, so no frame waits. Frames are
// copied into the Coalescer, so the datagram buffers may be reused at
// once. A relay does not coalesce: it forwards datagrams as they are.
//
// The receive side trusts the payload it merges (it does not verify each
// segment's TCP or UDP checksum): with encryption the AEAD has
// authenticated it, and in the clear the underlay's UDP checksum covered
// it. The kernel computes the checksum of every segment it cuts from a
// super-frame, so a coalesced UDP datagram that was sent without a
// checksum (0 over IPv4) arrives with one.
package offload
