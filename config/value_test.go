package config

import (
	"strings"
	"testing"
)

func TestDecodeYAML(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "a: no\nb: yes\nc: on", want: `{"a":"no","b":"yes","c":"on"}`}, // YAML 1.2: strings
		{in: "a: true\nb: null\nc: ~", want: `{"a":true,"b":null,"c":null}`},
		{in: "n: 1\nf: 1.5\ne: 1e3\nh: 0x1F\nu: 1_000", want: `{"e":1e3,"f":1.5,"h":31,"n":1,"u":1000}`},
		{in: "big: 9007199254740993", want: `{"big":9007199254740993}`}, // kept as text; the canonicaliser refuses it later
		{in: "d: 2024-01-02", want: `{"d":"2024-01-02"}`},
		{in: "", want: `null`},
		{in: "a: .inf", wantErr: "infinite"},
		{in: "? [1]\n: x", wantErr: "keys must be strings"},
		{in: "a: &x 1\nb: *x", wantErr: "anchors"},
		{in: "a: 1\n---\nb: 2", wantErr: "more than one"},
		{in: "a: !custom x", wantErr: "unsupported tag"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			v, err := DecodeYAML([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := jsonOf(t, v); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDecodeJSON(t *testing.T) {
	if _, err := DecodeJSON([]byte(`{"a":{"b":1,"b":2}}`)); err == nil || !strings.Contains(err.Error(), "/a/b: duplicate key") {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := DecodeJSON([]byte(`{} {}`)); err == nil {
		t.Error("two values accepted")
	}
	v, err := DecodeJSON([]byte(`{"x":[1.50,"<a>"]}`))
	if err != nil || jsonOf(t, v) != `{"x":[1.50,"<a>"]}` {
		t.Errorf("got %v %v", v, err)
	}
	y, err := JSONToYAML([]byte(`{"b":[1,2.5,"s",true,null],"a":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(y), "a: {}\nb:\n  - 1\n  - 2.5\n  - s\n  - true\n  - null\n"; got != want {
		t.Errorf("yaml = %q, want %q", got, want)
	}
}

func TestConceal(t *testing.T) {
	d := testDeployment(t)
	out, err := Conceal(d, "", []string{"OTHER=x"})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.EnvFile) != "VARPLANE_CONFIGURATION__OTHER=x\n" || strings.Join(out.Missing, ",") != "API_KEY" || !strings.Contains(string(out.Kubernetes), "name: configuration") {
		t.Errorf("concealed = %+v", out)
	}
	if _, err := Conceal(nil, "", []string{"bad"}); err == nil {
		t.Error("a malformed assignment was accepted")
	}
}
