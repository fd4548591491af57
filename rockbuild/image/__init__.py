"""Container images of a release's bundles: the image format (:mod:`.oci`), the base from the host's Debian packages
(:mod:`.base`), the registry client (:mod:`.registry`) and podman (:mod:`.podman`). What goes into an image and when it
is tested and pushed is the publish stage's (:mod:`rockbuild.publish.image`)."""
