package alipay

import (
	"fmt"
	"strconv"
	"strings"
)

// maxYuanDigits bounds the integer part of an amount: any more and its
// cents could overflow an int64.
const maxYuanDigits = 15

// ParseAmount reads an amount in yuan as Alipay writes it ("12.34", "12.3",
// "12") into fen (cents) exactly, without going through a float. A sign, an
// exponent, spaces, more than two decimals or an empty part is an error.
func ParseAmount(s string) (int64, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || (dot && frac == "") || len(frac) > 2 || len(whole) > maxYuanDigits || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("amount %q: want yuan as digits with at most two decimals (12.34)", s)
	}
	y, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("amount %q: %w", s, err)
	}
	var f int64
	if frac != "" {
		for len(frac) < 2 {
			frac += "0"
		}
		f, _ = strconv.ParseInt(frac, 10, 64)
	}
	return y*100 + f, nil
}

// FormatAmount writes fen as yuan with two decimals ("12.34"), as Alipay's
// total_amount takes it.
func FormatAmount(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s%d.%02d", sign, cents/100, cents%100)
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
