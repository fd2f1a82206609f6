package outbox

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding/spec"
	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/lapsehq/lapse/order"
)

// Format is how events are written on the wire.
type Format string

// The formats of --event-format.
const (
	// FormatJSON (the default) writes the Envelope: the event's id, type,
	// order id and time around its payload, the same bytes on every sink.
	FormatJSON Format = "json"
	// FormatCloudEvents writes CloudEvents 1.0: structured JSON
	// (application/cloudevents+json) where there are no headers (webhooks),
	// binary mode (attributes in headers, the payload as the body) on AMQP,
	// Kafka and NATS.
	FormatCloudEvents Format = "cloudevents"
)

// EventSource is the CloudEvents source attribute of lapse's events.
const EventSource = "/lapse"

// ParseFormat reads an --event-format value.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case "", FormatJSON:
		return FormatJSON, nil
	case FormatCloudEvents:
		return FormatCloudEvents, nil
	}
	return "", fmt.Errorf("event format %q: want json or cloudevents", s)
}

// Envelope is the body of an event in FormatJSON. Data is the payload the
// transition wrote (docs/events/<type>.schema.json), byte for byte.
type Envelope struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	OrderID   string          `json:"order_id"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// Structured encodes e as one self-describing body, for transports without
// headers of their own (webhooks): the Envelope, or a structured CloudEvent.
func (f Format) Structured(e order.Event) (body []byte, contentType string, err error) {
	if f != FormatCloudEvents {
		return envelope(e)
	}
	ce, err := cloudEvent(e)
	if err != nil {
		return nil, "", err
	}
	body, err = json.Marshal(ce)
	if err != nil {
		return nil, "", fmt.Errorf("encode event %s as a CloudEvent: %w", e.ID, err)
	}
	return body, "application/cloudevents+json", nil
}

// Binary encodes e for a transport with headers: in FormatJSON the Envelope
// and no headers; in FormatCloudEvents the payload as the body and the
// CloudEvents attributes as headers named with the transport's prefix
// ("ce_" on Kafka, "cloudEvents:" on AMQP, "ce-" on HTTP and NATS).
func (f Format) Binary(e order.Event, prefix string) (body []byte, contentType string, headers map[string]string, err error) {
	if f != FormatCloudEvents {
		body, contentType, err = envelope(e)
		return body, contentType, nil, err
	}
	ce, err := cloudEvent(e)
	if err != nil {
		return nil, "", nil, err
	}
	headers = map[string]string{}
	for _, a := range spec.New().Version(ce.SpecVersion()).Attributes() {
		if a.Kind() == spec.DataContentType {
			continue // the transport's own content type carries it
		}
		v := a.Get(ce.Context)
		if v == nil {
			continue
		}
		s, err := types.Format(v)
		if err != nil {
			return nil, "", nil, fmt.Errorf("encode event %s attribute %s: %w", e.ID, a.Name(), err)
		}
		// The SDK lowercases prefixes ("cloudEvents:" → "cloudevents:");
		// AMQP header names are case-sensitive, so the name is built here.
		headers[prefix+a.Name()] = s
	}
	return e.Payload, "application/json", headers, nil
}

func envelope(e order.Event) ([]byte, string, error) {
	b, err := json.Marshal(Envelope{ID: e.ID, Type: e.Type, OrderID: e.OrderID, CreatedAt: e.CreatedAt.UTC(), Data: e.Payload})
	if err != nil {
		return nil, "", fmt.Errorf("encode event %s: %w", e.ID, err)
	}
	return b, "application/json", nil
}

// cloudEvent is e as a CloudEvents 1.0 event: source EventSource, subject the
// order id, data the payload.
func cloudEvent(e order.Event) (cloudevents.Event, error) {
	ce := cloudevents.New(cloudevents.CloudEventsVersionV1)
	ce.SetID(e.ID)
	ce.SetSource(EventSource)
	ce.SetType(e.Type)
	ce.SetSubject(e.OrderID)
	ce.SetTime(e.CreatedAt.UTC())
	if err := ce.SetData("application/json", json.RawMessage(e.Payload)); err != nil {
		return ce, fmt.Errorf("encode event %s as a CloudEvent: %w", e.ID, err)
	}
	if err := ce.Validate(); err != nil {
		return ce, fmt.Errorf("encode event %s as a CloudEvent: %w", e.ID, err)
	}
	return ce, nil
}
