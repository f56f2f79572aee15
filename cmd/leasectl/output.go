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
	header bool // table: the header was printed
}

func (g *globals) printer() *printer { return &printer{w: g.stdout, json: g.output == "json"} }

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
	tw := tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)
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
