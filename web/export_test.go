package web

// LocalNext is localNext, for the table test of package web_test.
var LocalNext = localNext
