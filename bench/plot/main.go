// Command plot draws the medians of bench/compare.sh (a TSV of metric,
// size, tool, value, rounds) as one PNG: one-way latency and streaming
// bandwidth against message size, log-log, a line per tool.
//
//	plot -in median.tsv -out compare.png
package main

import (
	"bufio"
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series maps metric -> tool -> points (size, value).
type series map[string]map[string]plotter.XYs

func read(path string) (series, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := series{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		t := strings.Split(sc.Text(), "\t")
		if len(t) < 4 {
			continue
		}
		size, err1 := strconv.ParseFloat(t[1], 64)
		v, err2 := strconv.ParseFloat(t[3], 64)
		if err1 != nil || err2 != nil || v <= 0 {
			continue
		}
		if s[t[0]] == nil {
			s[t[0]] = map[string]plotter.XYs{}
		}
		s[t[0]][t[2]] = append(s[t[0]][t[2]], plotter.XY{X: size, Y: v})
	}
	return s, sc.Err()
}

// sizeTicks labels powers of two as B, KiB, MiB.
type sizeTicks struct{}

func (sizeTicks) Ticks(min, max float64) []plot.Tick {
	var t []plot.Tick
	for x := 1.0; x <= max*1.01; x *= 2 {
		if x < min/1.01 {
			continue
		}
		lbl := ""
		switch n := int(x); {
		case n >= 1<<20 && n%(1<<20) == 0:
			lbl = fmt.Sprintf("%d MiB", n>>20)
		case n >= 1<<10 && n%(1<<10) == 0:
			lbl = fmt.Sprintf("%d KiB", n>>10)
		default:
			lbl = fmt.Sprintf("%d B", n)
		}
		if n := int(x); n != 8 && n != 4096 && n != 65536 && n != 1<<20 {
			lbl = ""
		}
		t = append(t, plot.Tick{Value: x, Label: lbl})
	}
	return t
}

// valueTicks labels 1, 2 and 5 times the powers of ten (every multiple
// when the range is narrower).
type valueTicks struct{}

func (v valueTicks) Ticks(min, max float64) []plot.Tick {
	if t := v.ticks(min, max, []float64{1, 2, 5}); len(t) >= 3 {
		return t
	}
	return v.ticks(min, max, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9})
}

func (valueTicks) ticks(min, max float64, ms []float64) []plot.Tick {
	var t []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(min))); d <= max; d *= 10 {
		for _, m := range ms {
			if v := m * d; v >= min/1.01 && v <= max*1.01 {
				t = append(t, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64)})
			}
		}
	}
	return t
}

// colors gives each tool the same color in every panel; goverbs is red.
func colors(s series) map[string]color.Color {
	var tools []string
	seen := map[string]bool{}
	for _, m := range s {
		for tool := range m {
			if !seen[tool] {
				seen[tool] = true
				tools = append(tools, tool)
			}
		}
	}
	sort.Strings(tools)
	c := map[string]color.Color{}
	for i, tool := range tools {
		c[tool] = plotutil.Color(i + 1) // Color(0) is red
		if strings.HasPrefix(tool, "goverbs") {
			c[tool] = color.RGBA{R: 200, A: 255}
		}
	}
	return c
}

func panel(title, ylabel string, data map[string]plotter.XYs, col map[string]color.Color) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "message size"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	p.Y.Tick.Marker = valueTicks{}
	p.Legend.Top, p.Legend.Left = true, true
	tools := make([]string, 0, len(data))
	for k := range data {
		tools = append(tools, k)
	}
	sort.Strings(tools)
	for i, tool := range tools {
		pts := data[tool]
		sort.Slice(pts, func(a, b int) bool { return pts[a].X < pts[b].X })
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		c := col[tool]
		if strings.HasPrefix(tool, "goverbs") {
			l.Width = vg.Points(2.5)
		}
		l.Color, s.Color = c, c
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(tool, l, s)
	}
	return p, nil
}

func main() {
	in := flag.String("in", "median.tsv", "medians written by bench/compare.sh")
	out := flag.String("out", "compare.png", "PNG to write")
	title := flag.String("title", "goverbs vs peers", "title prefix")
	flag.Parse()
	s, err := read(*in)
	if err != nil {
		log.Fatal(err)
	}
	lat, err := panel(*title+": one-way latency (mean)", "µs", s["lat"], colors(s))
	if err != nil {
		log.Fatal(err)
	}
	bw, err := panel(*title+": streaming bandwidth", "MB/s", s["bw"], colors(s))
	if err != nil {
		log.Fatal(err)
	}
	img := vgimg.New(vg.Points(1300), vg.Points(520))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(20), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	for i, p := range []*plot.Plot{lat, bw} {
		p.Draw(tiles.At(dc, i, 0))
	}
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}
