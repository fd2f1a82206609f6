package payment

import (
	"context"
	"errors"
	"fmt"
)

// Trades is a gateway that knows trades by a trade number of lapse's
// choosing (Alipay's and WeChat Pay's out_trade_no): it queries and closes
// one trade.
type Trades interface {
	QueryTrade(ctx context.Context, tradeNo string) (Status, error)
	CloseTrade(ctx context.Context, tradeNo string) error
}

// ByTradeNo makes Trades an AttemptGateway: an order's own trade is numbered
// by its order id, each payment attempt's by its payment id. Adapters embed
// it and supply their Trades; the checks and error wrapping live here once.
type ByTradeNo struct {
	Name   string // the gateway's name, prefixed to errors
	Trades Trades
}

// Query implements Gateway: the trade whose number is the order id.
func (b ByTradeNo) Query(ctx context.Context, orderID string) (Status, error) {
	return b.query(ctx, orderID, "", orderID)
}

// QueryAttempt implements AttemptGateway: the trade whose number is the
// attempt's payment id.
func (b ByTradeNo) QueryAttempt(ctx context.Context, orderID, paymentID string) (Status, error) {
	return b.query(ctx, orderID, paymentID, paymentID)
}

// Close implements Gateway: the trade whose number is the order id.
func (b ByTradeNo) Close(ctx context.Context, orderID string) error {
	return b.close(ctx, orderID, "", orderID)
}

// CloseAttempt implements AttemptGateway: the trade whose number is the
// attempt's payment id.
func (b ByTradeNo) CloseAttempt(ctx context.Context, orderID, paymentID string) error {
	return b.close(ctx, orderID, paymentID, paymentID)
}

func (b ByTradeNo) query(ctx context.Context, orderID, paymentID, tradeNo string) (Status, error) {
	if tradeNo == "" {
		return Status{}, b.empty("query", paymentID)
	}
	st, err := b.Trades.QueryTrade(ctx, tradeNo)
	if err != nil {
		return Status{}, fmt.Errorf("%s: query %s: %w", b.Name, b.what(orderID, paymentID), err)
	}
	return st, nil
}

func (b ByTradeNo) close(ctx context.Context, orderID, paymentID, tradeNo string) error {
	if tradeNo == "" {
		return b.empty("close", paymentID)
	}
	if err := b.Trades.CloseTrade(ctx, tradeNo); err != nil {
		return fmt.Errorf("%s: close %s: %w", b.Name, b.what(orderID, paymentID), err)
	}
	return nil
}

func (b ByTradeNo) empty(op, paymentID string) error {
	if paymentID == "" {
		return fmt.Errorf("%s: %s: %w", b.Name, op, errEmptyOrderID)
	}
	return fmt.Errorf("%s: %s: %w", b.Name, op, errEmptyPaymentID)
}

var (
	errEmptyOrderID   = errors.New("empty order id")
	errEmptyPaymentID = errors.New("empty payment id")
)

func (b ByTradeNo) what(orderID, paymentID string) string {
	if paymentID == "" {
		return fmt.Sprintf("order %q", orderID)
	}
	return fmt.Sprintf("order %q payment %q", orderID, paymentID)
}
