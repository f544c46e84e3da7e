package xds

// versionID is an interned resource version: a stream's subscription holds the version its
// client has as one of these (4 bytes) instead of the 8-byte version, and the table holds each
// distinct version once, for as long as some stream's client holds it. 0 stands for version 0
// (the client holds nothing) and is never counted.
type versionID uint32

// versionTable interns versions with reference counts. A mesh's streams hold few distinct
// versions (one per resource and proxy class, and briefly the previous one), so the table stays
// small however many streams hold them.
type versionTable struct {
	refTable[uint64, versionID, struct{}]
}

func newVersionTable() *versionTable {
	return &versionTable{newRefTable[uint64, versionID, struct{}](1)}
}

// acquire interns v and takes a reference to it.
func (t *versionTable) acquire(v uint64) versionID {
	if v == 0 {
		return 0
	}
	return t.refTable.acquire(v)
}

// release drops a reference.
func (t *versionTable) release(id versionID) {
	if id != 0 {
		t.refTable.release(id)
	}
}

// version is the version an id stands for.
func (t *versionTable) version(id versionID) uint64 {
	if id == 0 {
		return 0
	}
	return t.key(id)
}
