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
// not decode is refused in the API's words — the message's name in the
// .proto files (leasegate.v1.TryAcquireRequest) and what is wrong with it
// — where connect-go's codecs name the Go type it was decoded into
// (*leasegatev1.TryAcquireRequest), which is nothing a caller knows.

// codecOptions registers the codecs on every handler.
func codecOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(protoCodec{}),
		connect.WithCodec(jsonCodec{name: "json"}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8"}),
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

func notProto(any) error {
	return errors.New("the gateway cannot encode this message") // a bug of ours, never the caller's
}

type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, notProto(message)
	}
	return proto.Marshal(m)
}

// MarshalAppend lets connect-go reuse its buffers.
func (protoCodec) MarshalAppend(dst []byte, message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, notProto(message)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

func (protoCodec) Unmarshal(data []byte, message any) error {
	m, ok := message.(proto.Message)
	if !ok {
		return notProto(message)
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return decodeError(message, "protobuf", err)
	}
	return nil
}

// MarshalStable and IsBinary serve Connect GET requests.
func (protoCodec) MarshalStable(message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, notProto(message)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// IsBinary reports that the encoding is not text.
func (protoCodec) IsBinary() bool { return true }

type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (jsonCodec) Marshal(message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, notProto(message)
	}
	return protojson.Marshal(m)
}

// MarshalAppend lets connect-go reuse its buffers.
func (jsonCodec) MarshalAppend(dst []byte, message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, notProto(message)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, m)
}

func (jsonCodec) Unmarshal(data []byte, message any) error {
	m, ok := message.(proto.Message)
	if !ok {
		return notProto(message)
	}
	if len(data) == 0 {
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
func (c jsonCodec) MarshalStable(message any) ([]byte, error) {
	b, err := c.Marshal(message)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// IsBinary reports that the encoding is text.
func (jsonCodec) IsBinary() bool { return false }
