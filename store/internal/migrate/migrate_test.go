package migrate

import (
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name     string
		fsys     fstest.MapFS
		versions []int
		wantErr  bool
	}{
		{
			name:     "ordered by version",
			fsys:     fstest.MapFS{"0002_b.sql": file("b"), "0001_a.sql": file("a"), "README.md": file("x")},
			versions: []int{1, 2},
		},
		{name: "gap", fsys: fstest.MapFS{"0001_a.sql": file("a"), "0003_c.sql": file("c")}, wantErr: true},
		{name: "duplicate", fsys: fstest.MapFS{"0001_a.sql": file("a"), "0001_b.sql": file("b")}, wantErr: true},
		{name: "bad name", fsys: fstest.MapFS{"init.sql": file("a")}, wantErr: true},
		{name: "zero version", fsys: fstest.MapFS{"0000_a.sql": file("a")}, wantErr: true},
		{name: "empty", fsys: fstest.MapFS{}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Load(tc.fsys)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Load() = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load(): %v", err)
			}
			if len(got) != len(tc.versions) {
				t.Fatalf("got %d migrations, want %d", len(got), len(tc.versions))
			}
			for i, m := range got {
				if m.Version != tc.versions[i] {
					t.Errorf("migration %d has version %d, want %d", i, m.Version, tc.versions[i])
				}
			}
			if got[0].SQL != "a" {
				t.Errorf("first migration SQL = %q, want %q", got[0].SQL, "a")
			}
		})
	}
}
