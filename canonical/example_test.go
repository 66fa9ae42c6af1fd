package canonical_test

import (
	"errors"
	"fmt"

	"github.com/varplane/varplane/canonical"
)

func Example() {
	out, err := canonical.Transform([]byte(`{ "b": [4.50, 1E30], "a": "\u00e9" }`))
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))

	d, _ := canonical.Digest([]byte(`{"a":1}`))
	same, _ := canonical.Digest([]byte("{ \"a\" : 1.0 }"))
	fmt.Println(d == same)

	_, err = canonical.Transform([]byte(`{"id":9007199254740993}`))
	var un *canonical.UnsafeNumber
	fmt.Println(errors.As(err, &un), un.Path)
	// Output:
	// {"a":"é","b":[4.5,1e+30]}
	// true
	// true /id
}
