package money_test

import (
	"math"
	"testing"

	"github.com/lapsehq/lapse/internal/money"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{1037, "USD", "10.37 USD"},
		{5, "USD", "0.05 USD"},
		{0, "EUR", "0.00 EUR"},
		{100, "EUR", "1.00 EUR"},
		{129999, "EUR", "1,299.99 EUR"},
		{123456789012, "USD", "1,234,567,890.12 USD"},
		{-1037, "USD", "-10.37 USD"},
		{-5, "USD", "-0.05 USD"},
		{1299, "JPY", "1,299 JPY"},
		{999, "JPY", "999 JPY"},
		{1000, "JPY", "1,000 JPY"},
		{0, "JPY", "0 JPY"},
		{-1299, "JPY", "-1,299 JPY"},
		{1500000, "KRW", "1,500,000 KRW"},
		{1234, "BHD", "1.234 BHD"},
		{1234567, "KWD", "1,234.567 KWD"},
		{7, "TND", "0.007 TND"},
		{12345, "CLF", "1.2345 CLF"},
		{1999, "XYZ", "19.99 XYZ"}, // a code the table does not know: two decimals, the most common
		{1999, "", "19.99"},        // no currency: the number alone
		{math.MaxInt64, "USD", "92,233,720,368,547,758.07 USD"},
		{math.MinInt64, "USD", "-92,233,720,368,547,758.08 USD"},
		{math.MinInt64, "JPY", "-9,223,372,036,854,775,808 JPY"},
	} {
		if got := money.Format(tc.minor, tc.currency); got != tc.want {
			t.Errorf("Format(%d, %q) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}

func TestExponent(t *testing.T) {
	t.Parallel()
	for cur, want := range map[string]int{"USD": 2, "EUR": 2, "JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0,
		"BHD": 3, "KWD": 3, "JOD": 3, "OMR": 3, "IQD": 3, "LYD": 3, "TND": 3, "CLF": 4, "UYW": 4, "usd": 2} {
		if got := money.Exponent(cur); got != want {
			t.Errorf("Exponent(%s) = %d, want %d", cur, got, want)
		}
	}
}
