package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The Connect handlers' codecs: connect-go's own, but a message that does
// not decode is refused in the API's words — its name in the .proto files
// (leasegate.v1.TryAcquireRequest) — where connect-go's name the Go type
// (*leasegatev1.TryAcquireRequest), which is nothing a caller knows.

// codecOptions registers the codecs on every handler.
func codecOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(codec{name: "proto"}),
		connect.WithCodec(codec{name: "json", json: true}),
		connect.WithCodec(codec{name: "json; charset=utf-8", json: true}),
	}
}

// decodeError is the refusal of data that does not decode as message.
func decodeError(message any, format string, err error) error {
	name := "a message"
	if m, ok := message.(proto.Message); ok {
		name = string(m.ProtoReflect().Descriptor().FullName())
	}
	// protojson and proto say "proto:" first, the codec's name and no
	// news, and then a space that is sometimes a no-break one (on purpose:
	// their messages are not to be parsed).
	detail := strings.TrimLeftFunc(strings.TrimPrefix(err.Error(), "proto:"), unicode.IsSpace)
	return fmt.Errorf("the body is not a valid %s in %s: %s", name, format, detail)
}

// errNotProto is a bug of ours, never the caller's.
var errNotProto = errors.New("the gateway cannot encode this message")

// codec is the protobuf codec, or with json the JSON one.
type codec struct {
	name string
	json bool
}

func (c codec) Name() string { return c.name }

func (c codec) Marshal(message any) ([]byte, error) { return c.MarshalAppend(nil, message) }

// MarshalAppend lets connect-go reuse its buffers.
func (c codec) MarshalAppend(dst []byte, message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	switch {
	case !ok:
		return nil, errNotProto
	case c.json:
		return protojson.MarshalOptions{}.MarshalAppend(dst, m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

func (c codec) Unmarshal(data []byte, message any) error {
	m, ok := message.(proto.Message)
	switch {
	case !ok:
		return errNotProto
	case !c.json:
		if err := proto.Unmarshal(data, m); err != nil {
			return decodeError(message, "protobuf", err)
		}
		return nil
	case len(data) == 0:
		return errors.New("the body is empty; want a JSON object")
	}
	// Unknown fields are let pass, as connect-go's codec does, so clients
	// and gateways need not run the same version of the API.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return decodeError(message, "JSON", err)
	}
	return nil
}

// MarshalStable and IsBinary serve Connect GET requests.
func (c codec) MarshalStable(message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, errNotProto
	}
	if !c.json {
		return proto.MarshalOptions{Deterministic: true}.Marshal(m)
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// IsBinary reports whether the encoding is not text.
func (c codec) IsBinary() bool { return !c.json }
