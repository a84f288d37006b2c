// Package syncbuf is a bytes.Buffer safe for concurrent writers and a
// reader: what tests give a logger or a server that writes from goroutines
// of its own, and then read.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer whose Write and String may be called concurrently.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
