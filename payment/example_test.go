package payment_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/lapsehq/lapse/payment"
)

// A gateway client against the mock gateway: the buyer pays one order,
// another is closed before anyone pays it.
func ExampleNewHTTPGateway() {
	mock := payment.NewMock(payment.MockConfig{}) // no CallbackURL: no callbacks
	srv := httptest.NewServer(mock)
	defer srv.Close()
	defer mock.Close()

	gw, err := payment.NewHTTPGateway(srv.URL, payment.HTTPConfig{Timeout: time.Second})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := mock.Pay("o-1", 2500, payment.OutcomeSucceeded, "pay-1"); err != nil {
		panic(err)
	}
	st, err := gw.Query(ctx, "o-1")
	fmt.Println(st.State, st.PaymentID, st.AmountCents, err)
	fmt.Println(errors.Is(gw.Close(ctx, "o-1"), payment.ErrAlreadyPaid))

	st, err = gw.Query(ctx, "o-2")
	fmt.Println(st.State, err)
	fmt.Println(gw.Close(ctx, "o-2"))
	_, err = mock.Pay("o-2", 100, payment.OutcomeSucceeded, "")
	fmt.Println(err)
	// Output:
	// PAID pay-1 2500 <nil>
	// true
	// NOT_PAID <nil>
	// <nil>
	// payment: mock: trade closed
}
