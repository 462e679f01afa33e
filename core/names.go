package core

// EventType names a kind of event, such as "OrderPlaced". Go string-based enums
// satisfy it with a one-line Name method; EventName adapts a plain string.
type EventType interface {
	Name() string
}

// AggregateType names the kind of entity an event is about, such as "Order".
// Events written without one belong to Global.
type AggregateType interface {
	Name() string
}

// EventName is an EventType for names known only at run time.
type EventName string

// Name returns the event type name.
func (n EventName) Name() string { return string(n) }

// AggregateName is an AggregateType for names known only at run time.
type AggregateName string

// Name returns the aggregate type name.
func (n AggregateName) Name() string { return string(n) }

// GlobalAggregateName is the aggregate type of events written without one.
const GlobalAggregateName = "__GLOBAL__"

// Global is the default aggregate type.
const Global = AggregateName(GlobalAggregateName)
