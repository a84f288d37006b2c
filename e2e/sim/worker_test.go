package sim

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

type logRec struct{ lines []string }

func (l *logRec) Log(args ...any) { l.lines = append(l.lines, fmt.Sprint(args...)) }

func TestLineLog(t *testing.T) {
	rec := &logRec{}
	l := &LineLog{T: rec}
	fmt.Fprint(l, "one\ntw")
	fmt.Fprint(l, "o\nthree\n")
	l.Close()
	fmt.Fprint(l, "after close\n")
	if want := []string{"one", "two", "three"}; !reflect.DeepEqual(rec.lines, want) {
		t.Fatalf("logged %q, want %q", rec.lines, want)
	}
}

func TestOutputsAndOneLine(t *testing.T) {
	outs := Outputs([]*kgo.Record{{Value: []byte("id-1"), Partition: 2}, {Value: []byte("id-2")}})
	if len(outs) != 2 || string(outs[0].Key) != "id-1" || string(outs[0].Value) != "id-1" || outs[0].Partition != 0 || string(outs[1].Value) != "id-2" {
		t.Fatalf("%+v", outs)
	}
	if got := OneLine("a\nb\n"); got != "a b " {
		t.Fatalf("%q", got)
	}
}
