package wire

// A packet train measures the rate of a link's bottleneck: the sender sends
// count train packets of the same size back to back (one batch), the
// receiver times their arrivals, and the dispersion (the bytes after the
// first over the time from the first to the last) is the rate at which the
// bottleneck delivered them. The receiver answers with a train report.
//
// A train packet:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 16   |   flags = 0   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         sender site ID                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        receiver site ID                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           train ID                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     index in the train        |    packets in the train       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	:                 padding (zeros) to the train's size           :
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A train report (flag 0x01, TrainFlagReport), from the train's receiver
// back to its sender, which is the report's receiver:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  magic 0xD7   |   version 1   |   type = 16   |   flags = 1   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  sender site ID (the reporter)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             receiver site ID (the train's sender)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                           train ID                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|       packets received        |   packets in the train        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  dispersion rate, kbit/s                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A train of MaxTrainPackets or more, or with an index not below its
// count, is malformed.

// TypeTrain is a packet train or its report.
const TypeTrain Type = 16

// TrainFlagReport marks a train report.
const TrainFlagReport uint8 = 1 << 0

// Train sizes.
const (
	TrainHeaderLen  = CommonHeaderLen + 4 + 4 + 4 + 2 + 2
	TrainReportLen  = TrainHeaderLen + 4
	MaxTrainPackets = 256
)

// Train is the parsed form of a train packet or report.
type Train struct {
	Report           bool
	Sender, Receiver SiteID
	ID               uint32
	// Index and Count place a packet in its train; in a report, Index is
	// the number of packets received.
	Index, Count uint16
	// Rate is a report's dispersion rate in kbit/s.
	Rate uint32
}

// AppendTrainPacket appends a train packet of size bytes (at least
// TrainHeaderLen) to b.
func AppendTrainPacket(b []byte, t *Train, size int) []byte {
	var h [TrainHeaderLen]byte
	putTrain(h[:], t, 0)
	b = append(b, h[:]...)
	for range max(size-TrainHeaderLen, 0) {
		b = append(b, 0)
	}
	return b
}

// AppendTrainReport appends a train report to b.
func AppendTrainReport(b []byte, t *Train) []byte {
	var h [TrainReportLen]byte
	putTrain(h[:], t, TrainFlagReport)
	be.PutUint32(h[TrainHeaderLen:], t.Rate)
	return append(b, h[:]...)
}

func putTrain(h []byte, t *Train, flags uint8) {
	PutCommon(h, TypeTrain, flags)
	be.PutUint32(h[4:], uint32(t.Sender))
	be.PutUint32(h[8:], uint32(t.Receiver))
	be.PutUint32(h[12:], t.ID)
	be.PutUint16(h[16:], t.Index)
	be.PutUint16(h[18:], t.Count)
}

// ParseTrain decodes a train packet or report into t.
func ParseTrain(b []byte, t *Train) error {
	if err := expect(b, TypeTrain, TrainHeaderLen); err != nil {
		return err
	}
	_, flags, _ := ParseCommon(b)
	*t = Train{Report: flags&TrainFlagReport != 0, Sender: SiteID(be.Uint32(b[4:])), Receiver: SiteID(be.Uint32(b[8:])),
		ID: be.Uint32(b[12:]), Index: be.Uint16(b[16:]), Count: be.Uint16(b[18:])}
	if t.Sender == 0 || t.Receiver == 0 || t.Sender == t.Receiver || t.Count == 0 || t.Count > MaxTrainPackets {
		return ErrMalformed
	}
	if t.Report {
		if len(b) < TrainReportLen {
			return ErrTruncated
		}
		t.Rate = be.Uint32(b[TrainHeaderLen:])
		if t.Index > t.Count {
			return ErrMalformed
		}
		return nil
	}
	if t.Index >= t.Count {
		return ErrMalformed
	}
	return nil
}
