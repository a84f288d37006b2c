package staging

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func sampleRecord() *ShadowRecord {
	return &ShadowRecord{
		Version:         1,
		ProxyID:         "proxy-1",
		TransactionalID: "txn-a",
		ProducerID:      1234567890123,
		ProducerEpoch:   7,
		GroupID:         "group",
		MemberID:        "member-xyz",
		Topics: []ShadowTopic{
			{
				TopicID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
				Partitions: []ShadowPartition{
					{Partition: 0, AcknowledgementBatches: []ShadowBatch{{FirstOffset: 10, LastOffset: 20, AcknowledgeTypes: []int8{1}}}},
					{Partition: 3, AcknowledgementBatches: []ShadowBatch{
						{FirstOffset: 0, LastOffset: 2, AcknowledgeTypes: []int8{1, 3, 1}},
						{FirstOffset: 5, LastOffset: 5, AcknowledgeTypes: []int8{3}},
					}},
				},
			},
			{TopicID: [16]byte{0xff}},
		},
	}
}

func TestShadowRoundTrip(t *testing.T) {
	for _, r := range []*ShadowRecord{sampleRecord(), {Version: 1}} {
		enc := r.AppendTo([]byte("prefix"))
		if !bytes.HasPrefix(enc, []byte("prefix")) {
			t.Fatal("AppendTo dropped dst")
		}
		enc = enc[len("prefix"):]
		if !IsShadowRecord(enc) {
			t.Fatal("IsShadowRecord false on an encoding")
		}
		got, err := DecodeShadowRecord(enc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
		if err := got.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	// Zero Version is written as ShadowVersion.
	got, err := DecodeShadowRecord((&ShadowRecord{ProxyID: "p"}).AppendTo(nil))
	if err != nil || got.Version != ShadowVersion {
		t.Fatalf("zero version: %v %v", got, err)
	}
}

func TestShadowDecodeErrors(t *testing.T) {
	enc := sampleRecord().AppendTo(nil)
	for i := range len(enc) {
		if _, err := DecodeShadowRecord(enc[:i]); err == nil {
			t.Fatalf("prefix of %d bytes decoded", i)
		}
	}
	if _, err := DecodeShadowRecord(append(enc[:len(enc):len(enc)], 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("trailing: %v", err)
	}
	bad := bytes.Clone(enc)
	bad[0] = 'X'
	if IsShadowRecord(bad) {
		t.Fatal("bad magic accepted")
	}
	if _, err := DecodeShadowRecord(bad); !errors.Is(err, ErrNotShadow) {
		t.Fatalf("magic: %v", err)
	}
	bad = bytes.Clone(enc)
	bad[4] = 3
	if _, err := DecodeShadowRecord(bad); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("version: %v", err)
	}
	// A huge count with few bytes left must fail, not allocate.
	huge := append([]byte("STXR\x01"), make([]byte, 4+4+8+2+4+4)...)
	huge = append(huge, 0xff, 0xff, 0xff, 0xff)
	if _, err := DecodeShadowRecord(huge); !errors.Is(err, ErrTruncated) {
		t.Fatalf("huge count: %v", err)
	}
	if n := testing.AllocsPerRun(10, func() { DecodeShadowRecord(huge) }); n > 3 {
		t.Fatalf("huge count allocates %v times", n)
	}
}

func TestShadowValidate(t *testing.T) {
	for _, b := range []ShadowBatch{
		{FirstOffset: 5, LastOffset: 4, AcknowledgeTypes: []int8{1}},
		{FirstOffset: -1, LastOffset: 4, AcknowledgeTypes: []int8{1}},
		{FirstOffset: 0, LastOffset: 4, AcknowledgeTypes: []int8{1, 1}},
		{FirstOffset: 0, LastOffset: 4},
	} {
		r := &ShadowRecord{Topics: []ShadowTopic{{Partitions: []ShadowPartition{{AcknowledgementBatches: []ShadowBatch{b}}}}}}
		if r.Validate() == nil {
			t.Errorf("%+v validated", b)
		}
	}
}

func TestShadowPartitionFor(t *testing.T) {
	// FNV-1a 32 of "" is 0x811c9dc5 = 2166136261; of "a" is 0xe40c292c.
	if got := ShadowPartitionFor("", 1000); got != 2166136261%1000 {
		t.Fatalf("empty: %d", got)
	}
	if got := ShadowPartitionFor("a", 1000); got != int32(uint32(0xe40c292c)%1000) {
		t.Fatalf("a: %d", got)
	}
	if ShadowPartitionFor("x", 0) != 0 || TouchPartitionFor("x", -1) != 0 {
		t.Fatal("non-positive partitions")
	}
	for _, id := range []string{"", "a", "txn-1", "txn-2", "some/longer.transactional-id"} {
		for n := int32(1); n < 20; n++ {
			s, touch := ShadowPartitionFor(id, n), TouchPartitionFor(id, n)
			if s < 0 || s >= n || touch < 0 || touch >= n {
				t.Fatalf("%q/%d out of range: %d %d", id, n, s, touch)
			}
			if s != ShadowPartitionFor(id, n) {
				t.Fatal("not deterministic")
			}
			if n > 1 && s == touch {
				t.Fatalf("%q/%d touch == shadow", id, n)
			}
		}
	}
}

func TestAppendRecordBatch(t *testing.T) {
	value := sampleRecord().AppendTo(nil)
	raw := AppendRecordBatch([]byte("xx"), 42, 3, 7, 1700000000000, value)[2:]
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if b.FirstOffset != 0 || int(b.Length) != len(raw)-12 || b.PartitionLeaderEpoch != -1 || b.Magic != 2 ||
		b.Attributes != 0x10 || b.LastOffsetDelta != 0 || b.FirstTimestamp != 1700000000000 ||
		b.MaxTimestamp != 1700000000000 || b.ProducerID != 42 || b.ProducerEpoch != 3 ||
		b.FirstSequence != 7 || b.NumRecords != 1 {
		t.Fatalf("batch fields: %+v", b)
	}
	if uint32(b.CRC) != crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatal("crc")
	}
	var r kmsg.Record
	if err := r.ReadFrom(b.Records); err != nil {
		t.Fatal(err)
	}
	if r.Key != nil || !bytes.Equal(r.Value, value) || r.OffsetDelta != 0 || r.TimestampDelta64 != 0 || len(r.Headers) != 0 {
		t.Fatalf("record: %+v", r)
	}
	if int(r.Length)+len(binary.AppendVarint(nil, int64(r.Length))) != len(b.Records) {
		t.Fatal("record length")
	}
}

func FuzzDecodeShadowRecord(f *testing.F) {
	f.Add(sampleRecord().AppendTo(nil))
	f.Add((&ShadowRecord{}).AppendTo(nil))
	f.Add([]byte("STXR\x01"))
	f.Add([]byte{})
	key := DeriveShadowKey([]byte("0123456789abcdef0123456789abcdef"))
	f.Add(sampleRecord().AppendSigned(nil, key))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := DecodeShadowRecord(in)
		if err != nil {
			if _, verr := VerifyShadowRecord(in, key); verr == nil {
				t.Fatal("verified what does not decode")
			}
			return
		}
		// The encoding is canonical: what decodes re-encodes to itself
		// (a signed record's fields, before its MAC).
		switch r.Version {
		case ShadowVersion:
			if out := r.AppendTo(nil); !bytes.Equal(out, in) {
				t.Fatalf("re-encode differs:\n in %x\nout %x", in, out)
			}
		case SignedShadowVersion:
			if out := r.appendFields(nil, SignedShadowVersion); !bytes.Equal(out, in[:len(in)-macLen]) {
				t.Fatalf("re-encode differs:\n in %x\nout %x", in, out)
			}
		}
		// Only the record signed with the key verifies under it.
		_, verr := VerifyShadowRecord(in, key)
		if signed := bytes.Equal(r.AppendSigned(nil, key), in); (verr == nil) != signed {
			t.Fatalf("verify %v, but signed with the key: %v", verr, signed)
		}
	})
}

// TestSignedRecordsVerifyOnlyUnderTheirKey: a version 2 record verifies
// under the key it was signed with and under no other; a tampered byte, a
// version 1 record and a truncated one do not verify.
func TestSignedRecordsVerifyOnlyUnderTheirKey(t *testing.T) {
	key := DeriveShadowKey([]byte("0123456789abcdef0123456789abcdef"))
	other := DeriveShadowKey([]byte("another secret, as long as it is"))
	rec := sampleRecord()
	enc := rec.AppendSigned(nil, key)
	got, err := VerifyShadowRecord(enc, key)
	if err != nil {
		t.Fatalf("own key: %v", err)
	}
	if got.Version != SignedShadowVersion || got.TransactionalID != rec.TransactionalID || len(got.Topics) != len(rec.Topics) {
		t.Fatalf("decoded %+v", got)
	}
	if _, err := VerifyShadowRecord(enc, other); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("another key: %v, want ErrBadSignature", err)
	}
	for i := 5; i < len(enc); i += 7 { // past magic and version
		bad := append([]byte(nil), enc...)
		bad[i] ^= 1
		if _, err := VerifyShadowRecord(bad, key); err == nil {
			t.Fatalf("byte %d flipped: verified", i)
		}
	}
	if _, err := VerifyShadowRecord(rec.AppendTo(nil), key); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("version 1: %v, want ErrUnsigned", err)
	}
	if _, err := VerifyShadowRecord(enc[:len(enc)-1], key); err == nil {
		t.Fatal("truncated MAC verified")
	}
}
