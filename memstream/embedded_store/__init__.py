"""Everything that exists only because Qdrant Edge lets one process open a shard.

With the embedded store (``MEMSTREAM_STORE=edge``) a partition's shard is held by the worker that owns
the partition, so a gateway reads and forgets through that worker:

- ``remote_store``: the ``VectorStore`` protocol over HTTP (the gateway's :class:`RemoteStore`, found
  through :class:`OwnerShards`) and the worker's side of it (``serve``), confined to one user;
- ``remote_recall``: a whole recall sent to the owner in one request, and run there;
- ``internal``: the worker's internal port that serves both, behind the gateways' token, with
  ``Recalls`` running each recall in a thread;
- ``read_leases``: the leases those threads hold, so a rebalance does not close a shard under a read.

With a Qdrant server every process opens the store itself and none of this runs: a reader can skip the
package whole. Only the gateway's store selection and the worker's wiring import it (the
``embedded-store`` contract in pyproject.toml).
"""
