package upstream

// A decoder of Kafka messages driven by Apache Kafka's own JSON message
// schemas (common/message/*.json in the kafka-clients jar), independent of
// kmsg: it walks a response body field by field at its version and reports
// every null it meets, saying whether Kafka's schema allows a null there.
// kmsg's schemas lag Kafka's (ShareFetch Records became non-nullable in v1),
// so a check written against kmsg would not see what the Java client rejects.

import (
	"archive/zip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sharetx/sharetx/e2e/sim"
)

type kafkaField struct {
	Name             string       `json:"name"`
	Type             string       `json:"type"`
	Versions         string       `json:"versions"`
	NullableVersions string       `json:"nullableVersions"`
	TaggedVersions   string       `json:"taggedVersions"`
	Tag              *int         `json:"tag"`
	Fields           []kafkaField `json:"fields"`
}

type kafkaStruct struct {
	Name     string       `json:"name"`
	Versions string       `json:"versions"`
	Fields   []kafkaField `json:"fields"`
}

type kafkaMessage struct {
	APIKey           *int          `json:"apiKey"`
	Type             string        `json:"type"`
	Name             string        `json:"name"`
	ValidVersions    string        `json:"validVersions"`
	FlexibleVersions string        `json:"flexibleVersions"`
	Fields           []kafkaField  `json:"fields"`
	CommonStructs    []kafkaStruct `json:"commonStructs"`

	common map[string][]kafkaField
}

// kafkaSchemas are the request and response schemas of one kafka-clients
// jar, by API key.
type kafkaSchemas struct {
	Requests, Responses map[int16]*kafkaMessage
}

// kafkaClientsJar is the kafka-clients jar that e2e/kafka/kafka.sh puts in
// its cache (SHARETX_CACHE, KAFKA_LIBS and KAFKA_VERSION as there).
func kafkaClientsJar() string {
	libs, version := sim.KafkaLibsDir("")
	return filepath.Join(libs, "kafka-clients-"+version+".jar")
}

func loadKafkaSchemas(jar string) (*kafkaSchemas, error) {
	zr, err := zip.OpenReader(jar)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	s := &kafkaSchemas{Requests: map[int16]*kafkaMessage{}, Responses: map[int16]*kafkaMessage{}}
	for _, f := range zr.File {
		if !strings.HasPrefix(f.Name, "common/message/") || !strings.HasSuffix(f.Name, ".json") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		raw, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		var m kafkaMessage
		if err := json.Unmarshal(stripJSONComments(raw), &m); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		if m.APIKey == nil || (m.Type != "request" && m.Type != "response") {
			continue
		}
		m.common = map[string][]kafkaField{}
		for _, cs := range m.CommonStructs {
			m.common[cs.Name] = cs.Fields
		}
		if m.Type == "request" {
			s.Requests[int16(*m.APIKey)] = &m
		} else {
			s.Responses[int16(*m.APIKey)] = &m
		}
	}
	if len(s.Responses) == 0 {
		return nil, fmt.Errorf("%s holds no message schemas", jar)
	}
	return s, nil
}

// stripJSONComments removes // comments outside strings.
func stripJSONComments(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inStr, esc := false, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inStr {
			out = append(out, c)
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		if c == '"' {
			inStr = true
		}
		if c == '/' && i+1 < len(b) && b[i+1] == '/' {
			for i < len(b) && b[i] != '\n' {
				i++
			}
			out = append(out, '\n')
			continue
		}
		out = append(out, c)
	}
	return out
}

// inVersions reports whether v is in a schema version range: "none", "3",
// "3+", "1-4".
func inVersions(spec string, v int16) bool {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "none" {
		return false
	}
	lo, hi := versionRange(spec)
	return v >= lo && v <= hi
}

func versionRange(spec string) (lo, hi int16) {
	if strings.HasSuffix(spec, "+") {
		n, _ := strconv.Atoi(strings.TrimSuffix(spec, "+"))
		return int16(n), math.MaxInt16
	}
	if a, b, ok := strings.Cut(spec, "-"); ok {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return int16(x), int16(y)
	}
	n, _ := strconv.Atoi(spec)
	return int16(n), int16(n)
}

// kafkaNull is a null met while decoding: where, and whether the schema
// allows it.
type kafkaNull struct {
	Path     string // e.g. ShareFetchResponse.Responses[0].Partitions[1].Records
	Type     string // the field's schema type
	Nullable bool
}

func (n kafkaNull) String() string {
	allowed := "NON-NULLABLE"
	if n.Nullable {
		allowed = "nullable"
	}
	return fmt.Sprintf("%s (%s, %s)", n.Path, n.Type, allowed)
}

type schemaDecoder struct {
	m        *kafkaMessage
	version  int16
	flexible bool
	b        []byte
	nulls    []kafkaNull
}

type decodeError struct{ msg string }

// decodeBody decodes a message body (no header) at version and returns the
// nulls in it; it fails if the body does not follow the schema exactly.
func (m *kafkaMessage) decodeBody(version int16, body []byte) (nulls []kafkaNull, err error) {
	if !inVersions(m.ValidVersions, version) {
		return nil, fmt.Errorf("%s has no version %d (valid %s)", m.Name, version, m.ValidVersions)
	}
	d := &schemaDecoder{m: m, version: version, flexible: inVersions(m.FlexibleVersions, version), b: body}
	defer func() {
		if r := recover(); r != nil {
			de, ok := r.(decodeError)
			if !ok {
				panic(r)
			}
			nulls, err = d.nulls, fmt.Errorf("%s v%d: %s", m.Name, version, de.msg)
		}
	}()
	d.fields(m.Name, m.Fields)
	if len(d.b) != 0 {
		return d.nulls, fmt.Errorf("%s v%d: %d bytes left after the last field", m.Name, version, len(d.b))
	}
	return d.nulls, nil
}

func (d *schemaDecoder) fail(format string, args ...any) {
	panic(decodeError{fmt.Sprintf(format, args...)})
}

func (d *schemaDecoder) take(n int, path string) []byte {
	if n < 0 || n > len(d.b) {
		d.fail("%s: needs %d bytes, %d left", path, n, len(d.b))
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *schemaDecoder) uvarint(path string) uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("%s: bad varint", path)
	}
	d.b = d.b[n:]
	return v
}

// length reads a length prefix: compact (uvarint of n+1) in flexible
// versions, else int16 (strings) or int32; -1 is null.
func (d *schemaDecoder) length(path string, short bool) int {
	if d.flexible {
		return int(d.uvarint(path)) - 1
	}
	if short {
		return int(int16(binary.BigEndian.Uint16(d.take(2, path))))
	}
	return int(int32(binary.BigEndian.Uint32(d.take(4, path))))
}

func (d *schemaDecoder) tagged(f kafkaField) bool {
	return d.flexible && f.Tag != nil && inVersions(f.TaggedVersions, d.version)
}

// fields decodes the fields of one struct at the current version, then its
// tagged fields in flexible versions.
func (d *schemaDecoder) fields(path string, fs []kafkaField) {
	for _, f := range fs {
		if !inVersions(f.Versions, d.version) || d.tagged(f) {
			continue
		}
		d.field(path+"."+f.Name, f)
	}
	if !d.flexible {
		return
	}
	n := d.uvarint(path + " tags")
	for range n {
		tag := int(d.uvarint(path + " tag"))
		size := int(d.uvarint(path + " tag size"))
		data := d.take(size, path+" tag data")
		var tf *kafkaField
		for i := range fs {
			if f := &fs[i]; f.Tag != nil && *f.Tag == tag && inVersions(f.Versions, d.version) && d.tagged(*f) {
				tf = f
			}
		}
		if tf == nil {
			continue // unknown tag: Kafka skips it
		}
		rest := d.b
		d.b = data
		d.field(path+"."+tf.Name, *tf)
		if len(d.b) != 0 {
			d.fail("%s.%s: %d bytes left in the tagged field", path, tf.Name, len(d.b))
		}
		d.b = rest
	}
}

func (d *schemaDecoder) structFields(f kafkaField, typ string) []kafkaField {
	if len(f.Fields) > 0 {
		return f.Fields
	}
	if cs, ok := d.m.common[typ]; ok {
		return cs
	}
	d.fail("%s: unknown struct type %s", f.Name, typ)
	return nil
}

func (d *schemaDecoder) null(path string, f kafkaField) {
	d.nulls = append(d.nulls, kafkaNull{Path: path, Type: f.Type, Nullable: inVersions(f.NullableVersions, d.version)})
}

var fixedSizes = map[string]int{
	"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
	"int64": 8, "float64": 8, "uuid": 16,
}

func (d *schemaDecoder) field(path string, f kafkaField) {
	typ := f.Type
	if elem, ok := strings.CutPrefix(typ, "[]"); ok {
		n := d.length(path, false)
		if n < 0 {
			d.null(path, f)
			return
		}
		if size, ok := fixedSizes[elem]; ok {
			d.take(n*size, path)
			return
		}
		for i := range n {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch elem {
			case "string":
				if l := d.length(p, true); l >= 0 {
					d.take(l, p)
				} else {
					d.null(p, kafkaField{Type: "string"}) // array elements are never nullable
				}
			default:
				d.fields(p, d.structFields(f, elem))
			}
		}
		return
	}
	if size, ok := fixedSizes[typ]; ok {
		d.take(size, path)
		return
	}
	switch typ {
	case "string":
		n := d.length(path, true)
		if n < 0 {
			d.null(path, f)
			return
		}
		d.take(n, path)
	case "bytes", "records":
		n := d.length(path, false)
		if n < 0 {
			d.null(path, f)
			return
		}
		d.take(n, path)
	default: // a struct
		if inVersions(f.NullableVersions, d.version) {
			if marker := int8(d.take(1, path)[0]); marker < 0 {
				d.null(path, f)
				return
			}
		}
		d.fields(path, d.structFields(f, typ))
	}
}
