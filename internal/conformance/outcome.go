package conformance

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// outcome watches one answer on its way from a gateway to a caller and
// tells whether the gateway answered the call without error, in whichever
// protocol the caller spoke:
//
//   - Connect unary: HTTP 200;
//   - Connect streaming (application/connect+…): an end-of-stream message
//     without an "error";
//   - gRPC: grpc-status 0, in the headers (trailers-only) or the trailers;
//   - gRPC-Web: a trailers frame with grpc-status 0.
//
// An answer cut off before its end (a gateway stopped under it) is not
// one without error: a caller cannot have read a confirmation from it.
type outcome struct {
	http.ResponseWriter
	status int
	frames envelopes // Connect streaming and gRPC-Web bodies
}

// Unwrap lets http.ResponseController reach the writer's Flush, which the
// proxy calls after every streamed message.
func (o *outcome) Unwrap() http.ResponseWriter { return o.ResponseWriter }

func (o *outcome) WriteHeader(code int) {
	if o.status == 0 {
		o.status = code
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *outcome) Write(p []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	n, err := o.ResponseWriter.Write(p)
	o.frames.write(p[:n])
	return n, err
}

// ok reports, once the proxy has written the whole answer, whether the
// gateway answered without error.
func (o *outcome) ok() bool {
	if o.status != http.StatusOK {
		return false
	}
	h := o.Header()
	ct := h.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/grpc-web"):
		end, ok := o.frames.last(0x80)
		return ok && grpcWebOK(end)
	case strings.HasPrefix(ct, "application/grpc"):
		st := h.Get("Grpc-Status")
		if st == "" {
			st = strings.Join(h[http.TrailerPrefix+"Grpc-Status"], "")
		}
		return st == "0"
	case strings.HasPrefix(ct, "application/connect+"):
		end, ok := o.frames.last(0x02)
		if !ok {
			return false
		}
		var msg struct {
			Error json.RawMessage `json:"error"`
		}
		return json.Unmarshal(end, &msg) == nil && msg.Error == nil
	}
	return true
}

// grpcWebOK reads a gRPC-Web trailers frame ("grpc-status: 0\r\n…").
func grpcWebOK(trailers []byte) bool {
	for line := range strings.SplitSeq(string(trailers), "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if strings.EqualFold(strings.TrimSpace(k), "grpc-status") {
			return strings.TrimSpace(v) == "0"
		}
	}
	return false
}

// envelopes follows a stream of length-prefixed messages (1 byte of
// flags, 4 of length, the payload) and keeps only the last frame whose
// flags have an end bit (Connect's end-of-stream 0x02, gRPC-Web's
// trailers 0x80); the messages before it pass through unread.
type envelopes struct {
	hdr   [5]byte
	nhdr  int    // header bytes of the current frame seen
	left  uint32 // its payload bytes still to come
	flags byte
	tail  []byte // the current end frame's payload so far

	endFlags byte // the last complete end frame's flags, 0 before one
	end      []byte
}

// endBits are the flags that mark a frame as a stream's end.
const endBits = 0x02 | 0x80

// endPayloadMax bounds what an end frame may hold here: an end-of-stream
// message is an error and some metadata.
const endPayloadMax = 1 << 20

func (e *envelopes) write(p []byte) {
	for len(p) > 0 {
		if e.nhdr < len(e.hdr) {
			c := copy(e.hdr[e.nhdr:], p)
			e.nhdr, p = e.nhdr+c, p[c:]
			if e.nhdr == len(e.hdr) {
				e.flags, e.left, e.tail = e.hdr[0], binary.BigEndian.Uint32(e.hdr[1:]), nil
				e.frameDone()
			}
			continue
		}
		c := min(uint32(len(p)), e.left)
		if e.flags&endBits != 0 && len(e.tail)+int(c) <= endPayloadMax {
			e.tail = append(e.tail, p[:c]...)
		}
		e.left, p = e.left-c, p[c:]
		e.frameDone()
	}
}

// frameDone starts the next frame once the current one's payload is all in.
func (e *envelopes) frameDone() {
	if e.left > 0 {
		return
	}
	if e.flags&endBits != 0 {
		e.endFlags, e.end = e.flags, e.tail
	}
	e.nhdr = 0
}

// last returns the payload of the last complete end frame if bit is set in
// its flags, decompressed when its compressed bit (0x01) is set.
func (e *envelopes) last(bit byte) ([]byte, bool) {
	switch {
	case e.endFlags&bit == 0:
		return nil, false
	case e.endFlags&0x01 == 0:
		return e.end, true
	}
	zr, err := gzip.NewReader(bytes.NewReader(e.end))
	if err != nil {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(zr, endPayloadMax))
	return b, err == nil
}
