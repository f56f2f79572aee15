package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// printer writes records as a table (a header, then one row per record)
// or as JSON (one object per line).
type printer struct {
	w      io.Writer
	json   bool
	header bool              // table: the header was printed
	batch  bool              // table: rows wait for flush, which aligns them
	tw     *tabwriter.Writer // table: the rows since the last flush
}

func (g *globals) printer() *printer { return &printer{w: g.stdout, json: g.output == "json"} }

// batchPrinter is a printer whose table rows are written, aligned with
// each other, at each flush: for commands that print many rows (a page, a
// queue, a message of events).
func (g *globals) batchPrinter() *printer {
	p := g.printer()
	p.batch = true
	return p
}

// flush writes the rows a batch printer holds.
func (p *printer) flush() error {
	if p.tw == nil {
		return nil
	}
	return p.tw.Flush()
}

// field is one column of a record.
type field struct {
	col string // table column
	key string // JSON key
	val any
}

func (p *printer) print(fields ...field) error {
	if p.json {
		// Keep the fields' order: build the object by hand.
		b := []byte{'{'}
		for i, f := range fields {
			if i > 0 {
				b = append(b, ',')
			}
			k, _ := json.Marshal(f.key)
			v, err := json.Marshal(jsonValue(f.val))
			if err != nil {
				return err
			}
			b = append(append(append(b, k...), ':'), v...)
		}
		_, err := p.w.Write(jsonSafe(append(b, "}\n"...)))
		return err
	}
	if p.tw == nil {
		p.tw = tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
	}
	tw := p.tw
	if !p.header {
		p.header = true
		cols := make([]string, len(fields))
		for i, f := range fields {
			cols[i] = f.col
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	vals := make([]string, len(fields))
	for i, f := range fields {
		vals[i] = tableValue(f.val)
	}
	fmt.Fprintln(tw, strings.Join(vals, "\t"))
	if p.batch {
		return nil
	}
	return tw.Flush()
}

func jsonValue(v any) any {
	switch v := v.(type) {
	case time.Time:
		if v.IsZero() {
			return nil
		}
		return v.UTC().Format(time.RFC3339Nano)
	case time.Duration:
		return v.Milliseconds()
	}
	return v
}

func tableValue(v any) string {
	switch v := v.(type) {
	case time.Time:
		if v.IsZero() {
			return "-"
		}
		return v.Local().Format(time.RFC3339)
	case string:
		if v == "" {
			return "-"
		}
		return termSafe(v)
	}
	return termSafe(fmt.Sprint(v))
}

// unprintable is the API's rule for text a terminal must never act on
// (queue.ValidateName and ValidateClientID apply the same): anything but
// letters, marks, numbers, punctuation, symbols and the plain space, and
// invalid UTF-8.
func unprintable(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }

// termSafe is how every text that leasectl did not write itself reaches a
// terminal — names, client ids, holder ids, election values, audit actors
// and reasons, shard names, the gateway's error messages: as it is when it
// is printable, else as a quoted Go string whose escapes (\n, \t, \x1b,
// \u202e …) show what it holds without acting on it. A newline cannot
// forge a row, a tab cannot shift a column, and no escape sequence reaches
// the operator's terminal, whatever a gateway or another client stored.
func termSafe(s string) string {
	if strings.IndexFunc(s, unprintable) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// jsonSafe is termSafe for encoded JSON: every character json.Marshal
// leaves raw that a terminal could act on (DEL, C1 controls, format
// characters such as bidi overrides, other spaces) becomes a \u escape,
// which every JSON reader decodes to the same string. Such characters
// occur only inside JSON strings, where the escape is valid.
func jsonSafe(b []byte) []byte {
	if strings.IndexFunc(string(b), func(r rune) bool { return r == 0x7f || r >= 0x80 && unprintable(r) }) < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for _, r := range string(b) {
		if r != 0x7f && (r < 0x80 || !unprintable(r)) {
			out = utf8.AppendRune(out, r)
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			continue
		}
		out = fmt.Appendf(out, `\u%04x`, r)
	}
	return out
}
