package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"os"
	"strings"
)

// barGroup is one cluster of two bars of the same unit: A (direct, or
// at-least-once) and B (through the proxy, or transactional).
type barGroup struct {
	Label  string
	A, B   float64
	ALabel string
	BLabel string
}

var (
	colA    = color.RGBA{0x4c, 0x72, 0xb0, 0xff}
	colB    = color.RGBA{0xdd, 0x84, 0x52, 0xff}
	colText = color.RGBA{0x20, 0x20, 0x20, 0xff}
	colAxis = color.RGBA{0x90, 0x90, 0x90, 0xff}
)

// writePlot draws a bar chart: one pair of bars per group, each pair
// scaled to its larger bar (the groups have different units), the B bar
// labelled with B as a percentage of A, and the absolute values under the
// group. Only the standard library: bars are rectangles, text is a 3x5
// bitmap font scaled up.
func writePlot(w io.Writer, title string, groups []barGroup) error {
	const (
		groupW = 150
		barW   = 50
		plotH  = 260
		top    = 70
		left   = 30
		scale  = 2 // font scale
	)
	width := left*2 + groupW*max(len(groups), 1)
	height := top + plotH + 90
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fill(img, img.Bounds(), color.RGBA{0xff, 0xff, 0xff, 0xff})
	drawText(img, left, 12, title, 3, colText)
	// legend
	var la, lb []string
	for _, g := range groups {
		if len(la) == 0 || la[len(la)-1] != g.ALabel {
			la, lb = append(la, g.ALabel), append(lb, g.BLabel)
		}
	}
	fill(img, image.Rect(left, 40, left+14, 54), colA)
	drawText(img, left+20, 42, strings.Join(la, ", "), scale, colText)
	x := left + 20 + textWidth(strings.Join(la, ", "), scale) + 30
	fill(img, image.Rect(x, 40, x+14, 54), colB)
	drawText(img, x+20, 42, strings.Join(lb, ", "), scale, colText)
	base := top + plotH
	fill(img, image.Rect(left-5, base, width-left+5, base+1), colAxis)
	for i, g := range groups {
		x0 := left + i*groupW + (groupW-2*barW-10)/2
		m := max(g.A, g.B)
		h := func(v float64) int {
			if m <= 0 || v <= 0 {
				return 0
			}
			return int(float64(plotH-20) * v / m)
		}
		fill(img, image.Rect(x0, base-h(g.A), x0+barW, base), colA)
		fill(img, image.Rect(x0+barW+10, base-h(g.B), x0+2*barW+10, base), colB)
		if g.A > 0 {
			pct := fmt.Sprintf("%.0f%%", 100*g.B/g.A)
			drawText(img, x0+barW+10, base-h(g.B)-14, pct, scale, colText)
		}
		drawText(img, x0, base+8, g.Label, scale, colText)
		drawText(img, x0, base+26, g.ALabel+" "+short(g.A), scale, colA)
		drawText(img, x0, base+44, g.BLabel+" "+short(g.B), scale, colB)
	}
	return png.Encode(w, img)
}

func writePlotFile(path, title string, groups []barGroup) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writePlot(f, title, groups); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// font3x5: each glyph is 5 rows of 3 pixels, '#' set. Lower case is drawn
// as upper case; unknown runes as a blank.
var font3x5 = map[rune]string{
	'A': ".#. #.# ### #.# #.#",
	'B': "##. #.# ##. #.# ##.",
	'C': ".## #.. #.. #.. .##",
	'D': "##. #.# #.# #.# ##.",
	'E': "### #.. ##. #.. ###",
	'F': "### #.. ##. #.. #..",
	'G': ".## #.. #.# #.# .##",
	'H': "#.# #.# ### #.# #.#",
	'I': "### .#. .#. .#. ###",
	'J': "..# ..# ..# #.# .#.",
	'K': "#.# #.# ##. #.# #.#",
	'L': "#.. #.. #.. #.. ###",
	'M': "#.# ### ### #.# #.#",
	'N': "##. #.# #.# #.# #.#",
	'O': ".#. #.# #.# #.# .#.",
	'P': "##. #.# ##. #.. #..",
	'Q': ".#. #.# #.# ##. .##",
	'R': "##. #.# ##. #.# #.#",
	'S': ".## #.. .#. ..# ##.",
	'T': "### .#. .#. .#. .#.",
	'U': "#.# #.# #.# #.# ###",
	'V': "#.# #.# #.# #.# .#.",
	'W': "#.# #.# ### ### #.#",
	'X': "#.# #.# .#. #.# #.#",
	'Y': "#.# #.# .#. .#. .#.",
	'Z': "### ..# .#. #.. ###",
	'0': "### #.# #.# #.# ###",
	'1': ".#. ##. .#. .#. ###",
	'2': "### ..# ### #.. ###",
	'3': "### ..# ### ..# ###",
	'4': "#.# #.# ### ..# ..#",
	'5': "### #.. ### ..# ###",
	'6': "### #.. ### #.# ###",
	'7': "### ..# ..# ..# ..#",
	'8': "### #.# ### #.# ###",
	'9': "### #.# ### ..# ###",
	'.': "... ... ... ... .#.",
	'-': "... ... ### ... ...",
	'%': "#.# ..# .#. #.. #.#",
	'/': "..# ..# .#. #.. #..",
	':': "... .#. ... .#. ...",
	'(': ".#. #.. #.. #.. .#.",
	')': ".#. ..# ..# ..# .#.",
	'>': "#.. .#. ..# .#. #..",
	'=': "... ### ... ### ...",
	'+': "... .#. ### .#. ...",
	',': "... ... ... .#. #..",
	'_': "... ... ... ... ###",
	'<': "..# .#. #.. .#. ..#",
	'|': ".#. .#. .#. .#. .#.",
}

func drawText(img *image.RGBA, x, y int, s string, scale int, c color.RGBA) {
	for _, r := range strings.ToUpper(s) {
		rows := strings.Fields(font3x5[r])
		for row := 0; row < len(rows); row++ {
			for col := 0; col < len(rows[row]); col++ {
				if rows[row][col] == '#' {
					fill(img, image.Rect(x+col*scale, y+row*scale, x+(col+1)*scale, y+(row+1)*scale), c)
				}
			}
		}
		x += 4 * scale
	}
}

func textWidth(s string, scale int) int { return len([]rune(s)) * 4 * scale }
