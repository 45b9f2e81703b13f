"""One module per page (or page family): each an APIRouter of its own."""
