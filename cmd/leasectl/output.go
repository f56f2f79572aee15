package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
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
		var b strings.Builder
		b.WriteByte('{')
		for i, f := range fields {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(f.key)
			v, err := json.Marshal(jsonValue(f.val))
			if err != nil {
				return err
			}
			b.Write(k)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteString("}\n")
		_, err := io.WriteString(p.w, b.String())
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
		return v
	}
	return fmt.Sprint(v)
}
