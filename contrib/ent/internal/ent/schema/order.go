// Package schema is the ent schema of the integration's tests and examples:
// one Order entity with a string id, in the table "orders".
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Order is an order of the shop the tests play.
type Order struct {
	ent.Schema
}

// Fields of Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").MaxLen(64).NotEmpty().Immutable(),
	}
}
