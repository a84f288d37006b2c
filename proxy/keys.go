package proxy

import (
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// keyInfo is what the proxy needs to know of an API key on every frame,
// worked out once instead of allocating a kmsg request per frame.
type keyInfo struct {
	known    bool  // kmsg has the key
	flexFrom int16 // the first version with a flexible (v2) header; MaxInt16: none
}

var keyTable = func() (t [kmsg.MaxKey + 1]keyInfo) {
	for k := range t {
		req := kmsg.RequestForKey(int16(k))
		if req == nil {
			continue
		}
		t[k] = keyInfo{known: true, flexFrom: math.MaxInt16}
		for v := int16(0); v <= req.MaxVersion(); v++ {
			req.SetVersion(v)
			if req.IsFlexible() {
				t[k].flexFrom = v
				break
			}
		}
	}
	return t
}()

// known reports whether kmsg knows the key.
func known(key int16) bool { return key >= 0 && key <= kmsg.MaxKey && keyTable[key].known }

// flexibleRequest reports whether a request of key at version has a flexible
// header; false for keys kmsg does not know. Versions newer than kmsg's stay
// flexible (flexibility never goes away in a later version).
func flexibleRequest(key, version int16) bool {
	return known(key) && version >= keyTable[key].flexFrom
}
