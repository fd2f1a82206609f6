// Package money formats lapse's amounts for people. lapse keeps every
// amount as an integer count of its currency's minor unit (amount_cents:
// cents for USD, yen for JPY, fils for BHD); a person reads "10.37 USD",
// "1,299 JPY" or "1.234 BHD". The dashboard and the CLI both print money
// with Format, so one amount reads the same everywhere.
package money

import (
	"strconv"
	"strings"
)

// exponents are the ISO 4217 minor-unit exponents other than 2, the
// common one, from the standard's table (list one). A code not listed
// has two decimals.
var exponents = map[string]int{
	// No minor unit in use.
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0,
	"PYG": 0, "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	// Thousandths.
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	// Ten-thousandths (units of account).
	"CLF": 4, "UYW": 4,
}

// Exponent is how many decimals currency's minor unit has: 2 for USD, 0
// for JPY, 3 for BHD, and 2 for a code it does not know.
func Exponent(currency string) int {
	if e, ok := exponents[currency]; ok {
		return e
	}
	return 2
}

// Format renders minor units of currency as a decimal with thousands
// separators and the code after it: Format(129999, "EUR") is
// "1,299.99 EUR", Format(1299, "JPY") "1,299 JPY", Format(1234, "BHD")
// "1.234 BHD". Without a currency it is the number alone, read with two
// decimals.
func Format(minor int64, currency string) string {
	exp := Exponent(currency)
	// The magnitude as an unsigned number: -MinInt64 does not fit an int64.
	mag := uint64(minor)
	if minor < 0 {
		mag = -mag
	}
	digits := strconv.FormatUint(mag, 10)
	if len(digits) <= exp {
		digits = strings.Repeat("0", exp-len(digits)+1) + digits
	}
	whole, frac := digits[:len(digits)-exp], digits[len(digits)-exp:]
	var b strings.Builder
	if minor < 0 {
		b.WriteByte('-')
	}
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if exp > 0 {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	if currency != "" {
		b.WriteByte(' ')
		b.WriteString(currency)
	}
	return b.String()
}
