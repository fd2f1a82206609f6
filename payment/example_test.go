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

// A refund through any gateway that can make one (payment.Refunder): sent
// twice under the attempt's key, it is one refund.
func ExampleRefunder() {
	mock := payment.NewMock(payment.MockConfig{})
	srv := httptest.NewServer(mock)
	defer srv.Close()
	defer mock.Close()
	if _, err := mock.Pay("o-1", 2500, payment.OutcomeSucceeded, "pay-1"); err != nil {
		panic(err)
	}

	var gw payment.Gateway
	gw, err := payment.NewHTTPGateway(srv.URL, payment.HTTPConfig{Timeout: time.Second})
	if err != nil {
		panic(err)
	}
	rf, ok := gw.(payment.Refunder)
	if !ok {
		panic("the gateway cannot refund")
	}
	r := payment.Refund{OrderID: "o-1", PaymentID: "pay-1", AmountCents: 2500, Currency: "USD", Key: payment.RefundKey("pay-1")}
	for range 2 {
		res, err := rf.Refund(context.Background(), r)
		fmt.Println(res.State, res.AmountCents, res.Currency, err)
	}
	fmt.Println(len(mock.Refunds("o-1")), "refund at the gateway")

	r.PaymentID, r.Key = "pay-unknown", payment.RefundKey("pay-unknown")
	_, err = rf.Refund(context.Background(), r)
	fmt.Println(errors.Is(err, payment.ErrUnknownPayment))
	// Output:
	// SUCCEEDED 2500 USD <nil>
	// SUCCEEDED 2500 USD <nil>
	// 1 refund at the gateway
	// true
}
