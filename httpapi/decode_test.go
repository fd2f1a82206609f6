package httpapi

import (
	"errors"
	"strings"
	"testing"
)

// Field names are exact and unique: a case variant or a repeated key must not
// slip a second amount past the decoder.
func TestDecodeRefusesCaseVariantsAndDuplicateKeys(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		`{"items":[{"sku":"a","qty":1}],"amount_cents":1,"AMOUNT_CENTS":2}`: `"AMOUNT_CENTS" is not a known field`,
		`{"ITEMS":[{"sku":"a","qty":1}],"amount_cents":1}`:                  `"ITEMS" is not a known field`,
		`{"items":[{"SKU":"a","qty":1}],"amount_cents":1}`:                  `items[0]."SKU" is not a known field`,
		`{"items":[{"sku":"a","qty":1}],"amount_cents":1,"amount_cents":2}`: `"amount_cents" appears twice`,
		`{"items":[{"sku":"a","qty":1,"qty":5}],"amount_cents":1}`:          `"qty" appears twice`,
	}
	for body, want := range cases {
		_, err := DecodeCreateOrder([]byte(body))
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_field" || !strings.Contains(ae.Message, want) {
			t.Errorf("%s: err = %v, want a 400 invalid_field saying %s", body, err, want)
		}
	}
	ok := `{"items":[{"sku":"a","qty":1},{"sku":"b","qty":2}],"amount_cents":1,"currency":"EUR","timeout_seconds":1.5}`
	if _, err := DecodeCreateOrder([]byte(ok)); err != nil {
		t.Fatalf("a valid body: %v", err)
	}
}
