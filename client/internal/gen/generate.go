// Package gen is the code oapi-codegen generates from httpapi/openapi.yaml:
// the API's models and a request-level client. Package client wraps it; this
// package is internal so that its generated names are not lapse's API.
package gen

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../../httpapi/openapi.yaml
